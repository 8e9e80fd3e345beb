// Package hooks is a go-redis v9 hook that makes lock contention, cache
// misses and slow scripts visible in any service, with no code change beyond
// rdb.AddHook(h).
//
// The hook times every command (per bounded command name), classifies
// errors, names Lua scripts (registered ones, cachewatch's own, and the
// owner-checked lock scripts of bsm/redislock and redsync), and recognises
// on the wire:
//
//   - lock attempts: SET key token NX [PX|EX] (and the lock libraries'
//     acquire scripts) answered OK (acquired) or nil (busy), per key group.
//     A retry is an attempt with the same key and owner token as one
//     answered busy within Options.RetryHorizon (lock libraries keep their
//     token across retries); an acquisition is timed from its first attempt
//     to its success. A busy first attempt is counted once its fate is
//     known: retried, it was a waiting caller's (mode wait, contention); not
//     retried within the horizon, a try-once caller's that skipped the work
//     (mode try_once), such as a run-once job's;
//   - lost locks: an owner-checked release answered -1 (expired) or 0 (another
//     owner's, for releases whose reply tells, such as redsync's; otherwise
//     expired_or_not_owner, as bsm/redislock's answers 0 for both), an
//     extension answered 0 (renew_failed);
//   - cache lookups: GET, GETEX, HGET, MGET and HMGET replies, nil being a
//     miss, per key group, with miss-burst detection (a read that failed is
//     a failed command, not a lookup).
//
// Command errors are classed (timeout, connection, unavailable, …); a nil
// reply is none, and neither is NOSCRIPT, which go-redis answers itself by
// sending the script with EVAL (it is counted as a NOSCRIPT reply).
//
// Options.Pool adds a collector of the client's connection pool (waits,
// timeouts: connection starvation). Once an OpenTelemetry SDK is installed
// (globally, or as Options.TracerProvider) the hook starts one span per
// command, with the database semantic conventions' attributes and never a
// key or value; Options.HotKeys keeps a top-K view of
// the most requested and most contended keys for a debug handler.
//
// Keys only ever appear as key groups (package keygroup). Commands sent by
// cachewatch's own instrumented client and its Redlock adapter
// (instrument/redlock) are timed but their lock and cache outcomes are left
// to them, as they know more than the wire shows.
//
// Add the hook once per client. On a ClusterClient add it to the cluster
// client itself, not to the node clients in OnNewNode as well: each command
// would be counted twice. The cluster client follows MOVED and ASK
// redirections below its hooks, so they appear as errors only when the
// redirections are exhausted (or on a plain client of a cluster node).
//
// go-redis sends its connection handshake (HELLO, CLIENT
// MAINT_NOTIFICATIONS, a pipeline of CLIENT SETINFO, and SELECT, READONLY
// or CLIENT SETNAME as configured) through hooks too. The hook does not
// measure connection setup, as it does not measure dialing: those commands,
// alone or in pipelines of nothing else, are neither timed nor counted as
// pipelines or errors (servers older than the handshake answer its newer
// subcommands with errors, which go-redis ignores).
package hooks

import (
	"context"
	"fmt"
	"path"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/burst"
	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// Signals selects what the hook measures.
type Signals uint8

// The signal sets; combine them with |.
const (
	// Commands: per-command latency and errors, pipeline latency.
	Commands Signals = 1 << iota
	// Scripts: EVAL/EVALSHA/FCALL latency per script name, NOSCRIPT.
	Scripts
	// Locks: lock attempts and lost locks per key group.
	Locks
	// CacheReads: cache lookups (hits, misses) and miss bursts per key
	// group.
	CacheReads
	// AllSignals is every signal; it is what a zero Options.Signals means.
	AllSignals = Commands | Scripts | Locks | CacheReads
)

// Options configures a Hook. The zero value is usable.
type Options struct {
	// Registerer receives the hook's metrics; nil means
	// prometheus.DefaultRegisterer, unless MeterProvider is set. Hooks and
	// instrumented clients may share a registry: they share the collectors.
	Registerer prometheus.Registerer
	// MeterProvider, when set, receives the same metrics as OpenTelemetry
	// instruments (signals.MeterName scope; names and kinds in
	// docs/metrics.md), and the database semantic conventions'
	// db.client.operation.duration and db.client.connection.count and
	// .timeouts (see SkipSemconvMetrics). With Registerer nil, metrics go
	// there only; set both to emit through both. nil means no OpenTelemetry
	// metrics: pass otel.GetMeterProvider() for the global one, which
	// forwards to the SDK the program installs, even later.
	MeterProvider metric.MeterProvider
	// SkipSemconvMetrics leaves the semantic conventions' db.client.*
	// metrics out, for a client whose redisotel instrumentation already
	// emits them; the cachewatch_ metrics are emitted all the same.
	SkipSemconvMetrics bool
	// DB is the client's database index, the db.namespace attribute of the
	// semantic-convention metrics (and 0 by default, as in go-redis).
	DB int
	// NativeHistogramBucketFactor, above 1, makes the Prometheus histograms
	// native (exponential) histograms too, beside their classic buckets;
	// dashboards keep reading the classic buckets. 0 means classic only.
	NativeHistogramBucketFactor float64
	// Name is the client label of every series the hook emits: commands,
	// scripts, pool, and the lock and cache series of its key groups
	// (default "default"). Each hook on a registry needs its own: New fails
	// with ErrNameTaken for a Name another hook on the registry has. An
	// instrument client on the hooked client should carry the same Name.
	Name string
	// KeyGroups maps keys to key groups; build one with keygroup.New for
	// rules of your own. nil means the registry's shared default
	// (keygroup.Shared), whose cap the hook shares with the instrumented
	// clients on the registry.
	KeyGroups *keygroup.Classifier
	// Signals selects what is measured; 0 means AllSignals.
	Signals Signals
	// Scripts names the service's own Lua scripts and functions. Scripts of
	// cachewatch and of common lock libraries are recognised anyway.
	Scripts []Script
	// MissBurstWindow and MissBurstThreshold tune miss-burst detection:
	// a key group with MissBurstThreshold misses within one window is a
	// burst (defaults 1s and 50).
	MissBurstWindow    time.Duration
	MissBurstThreshold int64
	// Clock is the clock of the miss-burst detector; nil means the real
	// clock. Command latencies are always timed on the real clock.
	Clock clockwork.Clock
	// Pool, when set, is the client whose connection pool statistics the
	// hook exports (see NewPoolCollector).
	Pool PoolStatser
	// TracerProvider receives one OpenTelemetry span per command and
	// pipeline. nil means no spans, as a nil MeterProvider means no
	// OpenTelemetry metrics: pass otel.GetTracerProvider() for the global
	// one. With the global provider no span is started while it is still
	// otel's default (no SDK installed), and spans start once a program
	// installs one (otel.SetTracerProvider).
	TracerProvider trace.TracerProvider
	// ServerAddress ("host:port") is put on spans as server.address and
	// server.port.
	ServerAddress string
	// TryOnce names key groups whose locks are always taken try-once:
	// their callers skip the work when the lock is busy (a periodic job that
	// one instance runs), so a busy answer is the design, not contention.
	// The hook infers that on the wire without it (see RetryHorizon); TryOnce
	// overrides the inference: the lock attempts and acquisitions of these
	// groups are labelled mode="try_once" at once. Each entry is a key group
	// as the classifier names it ("jobs:lock:report") or a path.Match pattern
	// over key group names ("jobs:lock:*"); New rejects a malformed pattern.
	TryOnce []string
	// RetryHorizon is how long after a busy lock attempt a retry (the same
	// key and owner token from this client) may come and still belong to
	// the same acquisition (default DefaultRetryHorizon, 1s). A busy first
	// attempt retried within it was a waiting caller's: it counts as
	// mode="wait" (contention) when the retry comes. One not retried within
	// it was a try-once caller's, which skipped the work: it counts as
	// mode="try_once" once the horizon has passed (at the next lock attempt
	// or scrape). Set it above the longest backoff of the service's lock
	// clients and below the period of its run-once jobs.
	RetryHorizon time.Duration
	// HotKeys, when positive, keeps a top-K sketch of that many of the most
	// requested and most contended keys per key group (see HotKeys). Keys
	// are never labels.
	HotKeys int
}

// Hook is a go-redis v9 hook (redis.Hook). It is safe for concurrent use and
// may be added to several clients, which then share its series; to tell
// clients apart, give each its own hook and Name.
type Hook struct {
	signals Signals
	groups  *keygroup.Classifier

	// What every command reads comes first, to share cache lines.
	fast    [len(hotCommands)]*command // cmds' entries for hotCommands
	tracing *tracing
	semconv *semconvMetrics // nil without a MeterProvider, or when skipped
	// semconvBatch are the success options of a pipeline and a transaction.
	semconvBatch [2][]metric.RecordOption
	scripts      *scriptRegistry
	byGroup      *groupSet
	retries      *retryTable
	hot          *hotKeys

	cmds  map[string]*command
	other *command
	pipe  [2]lazyObserver // pipeline, tx
}

var _ redis.Hook = (*Hook)(nil)

// vecs holds the series a hook emits.
type vecs struct {
	cmdDur, pipeDur, scriptDur, acquire                 *emit.HistogramVec
	cmdErrs, noscript, lookups, attempts, lost, bursted *emit.CounterVec
	ends                                                *emit.CounterVec
}

// New returns a Hook for opts. It registers the hook's metrics with
// opts.Registerer.
func New(opts Options) (*Hook, error) {
	sinks := emit.New(opts.Registerer, opts.MeterProvider, opts.NativeHistogramBucketFactor)
	reg := sinks.Registerer
	name := opts.Name
	if name == "" {
		name = "default"
	}
	h := &Hook{signals: opts.Signals, groups: opts.KeyGroups,
		tracing: newTracing(opts.TracerProvider, opts.ServerAddress)}
	if h.signals == 0 {
		h.signals = AllSignals
	}
	horizon, err := retryHorizon(opts)
	if err != nil {
		return nil, err
	}
	if reg != nil {
		if err := claimName(reg, name); err != nil {
			return nil, err
		}
	}
	v, err := h.register(sinks)
	if err != nil {
		return nil, err
	}
	if h.groups == nil {
		h.groups = emit.SharedClassifier(sinks)
	}
	if sinks.Meter != nil && !opts.SkipSemconvMetrics {
		if h.semconv, err = newSemconv(sinks.Meter, opts); err != nil {
			return nil, fmt.Errorf("hooks: %w", err)
		}
		h.semconvBatch = [2][]metric.RecordOption{h.semconv.operation(batchNames[0]), h.semconv.operation(batchNames[1])}
	}
	h.buildCommands(v, name)
	h.pipe = [2]lazyObserver{newLazyObserver(v.pipeDur, name, "pipeline"), newLazyObserver(v.pipeDur, name, "tx")}
	if h.scripts, err = newScriptRegistry(opts.Scripts, scriptSeries(v, name)); err != nil {
		return nil, err
	}
	h.byGroup = newGroupSet(h.groups, groupSeries(v, name, opts))
	h.retries = newRetryTable(horizon, h.settleTryOnce)
	if reg != nil && h.on(Locks) {
		// Every scrape settles the acquisitions whose horizon has passed,
		// however quiet the locks have been since.
		if err := reg.Register(sweeper{h.retries}); err != nil {
			return nil, fmt.Errorf("hooks: register: %w", err)
		}
	}
	if opts.HotKeys > 0 {
		h.hot = newHotKeys(opts.HotKeys)
	}
	if opts.Pool != nil {
		if err := h.observePool(sinks, name, opts); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// retryHorizon checks the TryOnce patterns and returns the retry horizon,
// the default for 0.
func retryHorizon(opts Options) (time.Duration, error) {
	for _, p := range opts.TryOnce {
		if _, err := path.Match(p, ""); err != nil {
			return 0, fmt.Errorf("hooks: TryOnce pattern %q: %w", p, err)
		}
	}
	switch {
	case opts.RetryHorizon == 0:
		return DefaultRetryHorizon, nil
	case opts.RetryHorizon < time.Millisecond:
		return 0, fmt.Errorf("hooks: RetryHorizon %v: want at least 1ms", opts.RetryHorizon)
	}
	return opts.RetryHorizon, nil
}

// scriptSeries returns the constructor of a known script's series.
func scriptSeries(v *vecs, name string) func(script string, role Role) *scriptInfo {
	return func(script string, role Role) *scriptInfo {
		s := &scriptInfo{name: script, role: role, noscript: newLazyCounter(v.noscript, name, script)}
		for i := range s.dur {
			s.dur[i] = newLazyObserver(v.scriptDur, name, script, scriptCmdNames[i])
		}
		return s
	}
}

// groupSeries returns the constructor of a key group's series, with the
// miss-burst detector they share on opts.Clock.
func groupSeries(v *vecs, name string, opts Options) func(group string) *groupMetrics {
	clock := opts.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	bursts := burst.New(burst.Options{Window: opts.MissBurstWindow, Threshold: opts.MissBurstThreshold, Now: clock.Now})
	return func(group string) *groupMetrics {
		return newGroupMetrics(v, name, group, lockMode(opts.TryOnce, group), bursts)
	}
}

// register builds the series of the enabled signals on every sink; the
// others stay unregistered (and unused).
func (h *Hook) register(s emit.Sinks) (*vecs, error) {
	v := &vecs{}
	var err error
	counter := func(on Signals, c **emit.CounterVec, id signals.ID) {
		if err == nil && h.on(on) {
			*c, err = s.Counter(id)
		}
	}
	histogram := func(on Signals, o **emit.HistogramVec, id signals.ID) {
		if err == nil && h.on(on) {
			*o, err = s.Histogram(id)
		}
	}
	histogram(Commands, &v.cmdDur, signals.CommandDuration)
	histogram(Commands, &v.pipeDur, signals.PipelineDuration)
	counter(Commands, &v.cmdErrs, signals.CommandErrors)
	histogram(Scripts, &v.scriptDur, signals.ScriptDuration)
	counter(Scripts, &v.noscript, signals.ScriptNoscript)
	counter(CacheReads, &v.lookups, signals.CacheLookups)
	counter(CacheReads, &v.bursted, signals.MissBursts)
	counter(Locks, &v.attempts, signals.LockAttempts)
	counter(Locks, &v.lost, signals.LocksLost)
	counter(Locks, &v.ends, signals.LockLeaseEnds)
	histogram(Locks, &v.acquire, signals.LockAcquireDuration)
	if err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	return v, nil
}

func (h *Hook) buildCommands(v *vecs, client string) {
	h.cmds = make(map[string]*command, len(knownCommands))
	for _, n := range knownCommands {
		h.cmds[n] = h.newCommand(v, client, n)
	}
	h.other = h.newCommand(v, client, otherCommand)
	for i, n := range hotCommands {
		h.fast[i] = h.cmds[n]
	}
}

func (h *Hook) newCommand(v *vecs, client, name string) *command {
	c := &command{name: name, dur: newLazyObserver(v.cmdDur, client, name)}
	c.kind, c.script = kindOf(name)
	for i := range c.errs {
		c.errs[i] = newLazyCounter(v.cmdErrs, client, name, errClass(i).String())
	}
	c.span = h.tracing.commandSpan(name)
	if h.semconv != nil {
		c.semconvOK = h.semconv.operation(name)
	}
	return c
}

// lockMode is the mode label of group's lock series: try_once when tryOnce
// names the group or a pattern matches it, wait otherwise.
func lockMode(tryOnce []string, group string) string {
	for _, p := range tryOnce {
		if ok, _ := path.Match(p, group); ok || p == group {
			return signals.ModeTryOnce
		}
	}
	return signals.ModeWait
}

// settleTryOnce counts the busy first attempt of an acquisition in the key
// group of index group that was not retried within the horizon: a try-once
// caller's.
func (h *Hook) settleTryOnce(group int) {
	if list := *h.byGroup.list.Load(); group < len(list) {
		list[group].tryOnceBusy.Inc()
	}
}

// sweeper is a collector that collects nothing: each scrape makes it settle
// the retry table's entries whose horizon has passed, so that their counts
// are exported by the next scrape at the latest.
type sweeper struct{ t *retryTable }

func (sweeper) Describe(chan<- *prometheus.Desc) {}

func (s sweeper) Collect(chan<- prometheus.Metric) { s.t.sweep(uint32(monotonic() / time.Millisecond)) }

// newGroupMetrics makes group's record, its lock series labelled with mode;
// its miss counter is resolved here, once, so the detector's lookup stays
// off the per-command path.
func newGroupMetrics(v *vecs, client, group, mode string, bursts *burst.Detector) *groupMetrics {
	g := &groupMetrics{bursts: newLazyCounter(v.bursted, client, group), misses: bursts.Group(group)}
	for i := range g.lookups {
		g.lookups[i] = newLazyCounter(v.lookups, client, group, lookupResultNames[i])
	}
	for r := range g.attempts {
		for a := range g.attempts[r] {
			g.attempts[r][a] = newLazyCounter(v.attempts, client, group, attemptResultNames[r], attemptNames[a], mode)
		}
	}
	for i := range g.lost {
		g.lost[i] = newLazyCounter(v.lost, client, group, lostReasonNames[i])
	}
	for i := range g.ends {
		g.ends[i] = newLazyCounter(v.ends, client, group, endNames[i])
	}
	g.defers = mode == signals.ModeWait
	g.tryOnceBusy = newLazyCounter(v.attempts, client, group, attemptResultNames[attemptBusy], attemptNames[0], signals.ModeTryOnce)
	g.acquired[attemptAcquired] = newLazyObserver(v.acquire, client, group, "acquired", mode)
	g.acquired[attemptError] = newLazyObserver(v.acquire, client, group, "error", mode)
	g.gaveUp = newLazyObserver(v.acquire, client, group, "gave_up", mode)
	return g
}

// epoch anchors monotonic.
var epoch = time.Now()

// monotonic reads only the monotonic clock: time.Since of a time that has a
// monotonic reading skips the wall clock, which time.Now also reads. That
// halves the cost of timing a command.
func monotonic() time.Duration { return time.Since(epoch) }

// seconds is d in seconds: one floating-point division, where
// d.Seconds() splits d into whole seconds and nanoseconds first (equal but
// for the last bit of rounding).
func seconds(d time.Duration) float64 { return float64(d) / 1e9 }

func (h *Hook) on(s Signals) bool { return h.signals&s != 0 }

// command returns the command entry for a command's first argument.
func (h *Hook) command(args []any) *command {
	if len(args) == 0 {
		return h.other
	}
	name, ok := args[0].(string)
	if !ok {
		return h.other
	}
	switch name { // the commands go-redis sends most, without hashing
	case "get":
		return h.fast[0]
	case "set":
		return h.fast[1]
	case "evalsha":
		return h.fast[2]
	case "mget":
		return h.fast[3]
	case "hget":
		return h.fast[4]
	}
	if c, ok := h.cmds[name]; ok {
		return c
	}
	var buf [24]byte
	if n := lowerASCII(buf[:], name); n > 0 {
		if c, ok := h.cmds[string(buf[:n])]; ok {
			return c
		}
	}
	return h.other
}

// DialHook implements redis.Hook; dialing is not measured (the pool
// collector reports connection churn), so it returns next unchanged.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		c := h.command(args)
		if c.kind >= kindSetup && isSetup(c.kind, args) {
			return next(ctx, cmd) // a connection's setup is not measured
		}
		var span trace.Span
		if h.tracing.recording() {
			ctx, span = h.tracing.start(ctx, &c.span)
		}
		start := monotonic()
		err := next(ctx, cmd)
		end := monotonic()
		// The hook sees the reply's error as next's result: go-redis sets
		// cmd.Err() only after the hook chain returns.
		f := finished{cmd: cmd, args: args, err: err, d: seconds(end - start), start: start, end: end, span: span}
		h.observe(ctx, c, &f)
		if span != nil {
			endSpan(span, f.class, f.failed)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook. The pipeline (or MULTI/EXEC
// transaction) is timed as a whole; each command in it is counted and gets
// an equal share of the pipeline's duration, so that the command histogram's
// sum stays the time actually spent.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.setupOnly(cmds) {
			return next(ctx, cmds) // a connection's handshake is not measured
		}
		var span trace.Span
		if h.tracing.recording() {
			ctx, span = h.tracing.start(ctx, &h.tracing.batch)
			span.SetAttributes(attrBatchSize.Int(len(cmds)))
		}
		start := monotonic()
		err := next(ctx, cmds)
		end := monotonic()
		d := seconds(end - start)
		kind := pipelineKind(cmds)
		if h.on(Commands) {
			h.pipe[kind].ObserveContext(ctx, d)
		}
		if h.semconv != nil {
			h.semconv.record(ctx, h.semconvBatch[kind], batchNames[kind], d, failedBatch(err), classifyErrOrZero(err), err)
		}
		share := d / float64(max(len(cmds), 1))
		var firstClass errClass
		anyFailed := false
		for _, cmd := range cmds {
			args := cmd.Args()
			f := finished{cmd: cmd, args: args, err: cmd.Err(), d: share, start: start, end: end, batched: true}
			h.observe(ctx, h.command(args), &f)
			if f.failed && !anyFailed {
				firstClass, anyFailed = f.class, true
			}
		}
		if span != nil {
			endSpan(span, firstClass, anyFailed)
		}
		return err
	}
}

// setupOnly reports a pipeline of connection setup commands only (isSetup):
// go-redis's handshake of a new connection.
func (h *Hook) setupOnly(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		args := cmd.Args()
		if !isSetup(h.command(args).kind, args) {
			return false
		}
	}
	return len(cmds) > 0
}

// batchNames are the semantic conventions' operation names of a pipeline
// and a transaction, by pipelineKind.
var batchNames = [2]string{"PIPELINE", "MULTI"}

// classifyErrOrZero classifies a pipeline's error; without one the class is
// not read.
func classifyErrOrZero(err error) errClass {
	if err == nil || err == redis.Nil {
		return 0
	}
	return classifyErr(err)
}

// failedBatch tells whether a pipeline's error is a failure: not a nil
// reply, nor a NOSCRIPT that go-redis answers itself.
func failedBatch(err error) bool {
	return err != nil && err != redis.Nil && classifyErr(err) != errNoscript
}

// pipelineKind is 1 for a MULTI/EXEC transaction, 0 for a plain pipeline.
func pipelineKind(cmds []redis.Cmder) int {
	if len(cmds) > 0 {
		if args := cmds[0].Args(); len(args) > 0 {
			if s, ok := args[0].(string); ok && (s == "multi" || s == "MULTI") {
				return 1
			}
		}
	}
	return 0
}

// finished is what the hook knows of a command once it returned.
type finished struct {
	cmd    redis.Cmder
	args   []any         // cmd.Args()
	err    error         // the reply's error; redis.Nil for a nil reply
	class  errClass      // set by observe when failed
	failed bool          // err is an error (a nil reply is not)
	d      float64       // latency in seconds (a share of it, in a pipeline)
	start  time.Duration // monotonic time when it was sent (its pipeline, in one)
	end    time.Duration // monotonic time at the end
	span   trace.Span    // nil without tracing, and inside pipelines
	// batched: sent in a pipeline, which the semantic-convention metrics
	// record as one operation.
	batched bool
	// noscript: answered NOSCRIPT, which is not a failure.
	noscript bool
}

// observe records one finished command and fills in f.class and f.failed.
// A NOSCRIPT reply is no failure (go-redis sends the script with EVAL then):
// f.noscript says it was one.
func (h *Hook) observe(ctx context.Context, c *command, f *finished) {
	f.failed = f.err != nil && f.err != redis.Nil
	if f.failed {
		f.class = classifyErr(f.err)
		if f.class == errNoscript {
			f.failed, f.noscript = false, true
		}
	}
	if h.on(Commands) {
		c.dur.ObserveContext(ctx, f.d)
		if f.failed {
			c.errs[f.class].Inc()
		}
	}
	if h.semconv != nil && !f.batched {
		h.semconv.record(ctx, c.semconvOK, c.name, f.d, f.failed, f.class, f.err)
	}
	switch c.kind {
	case kindPlain:
	case kindScript:
		if h.on(Scripts | Locks) {
			h.script(ctx, c, f)
		}
	case kindGet, kindHGet, kindMGet, kindHMGet:
		if h.on(CacheReads) && !isInstrumented(ctx) {
			h.lookup(c.kind, f)
		}
	case kindSet, kindSetNX:
		if h.on(Locks) {
			h.setNX(ctx, c.kind, f)
		}
	}
}
