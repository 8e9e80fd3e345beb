// Package probe serves the exporter's metrics of any Redis named in a
// scrape's URL — /probe?target=redis://host:port&module=name — the
// multi-target pattern of blackbox_exporter: Prometheus discovers the
// targets and spreads them over exporter replicas (hashmod relabelling), the
// exporter holds no list of them.
//
// The exporter is stateful (a lock index fed by keyspace notifications, a
// paced SCAN), so a probe does not sample: the first probe of a target
// starts its sampler (exporter.Exporter, as for a --targets.file target)
// and waits a bounded time for its first sample; later probes serve the
// latest sample without reaching Redis, its age in
// cachewatch_exporter_data_timestamp_seconds as ever. A target not probed
// for IdleTimeout is stopped and its connections closed. At most MaxTargets
// targets are sampled at once, so query strings cannot make the exporter
// open unbounded connections.
//
// Credentials come from a module of the modules file, never from the
// target: a target URL with a password or a user is refused (400), as is a
// malformed one or an unknown module. A target that cannot be reached or
// is not Redis answers 200 with cachewatch_exporter_up 0 and
// cachewatch_exporter_sample_errors_total by stage and class: the reason.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/signals"
)

// Defaults for the zero values of Options.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultMaxTargets  = 1000
	DefaultFirstWait   = 5 * time.Second
	// MaxTargetLength bounds the target parameter (it becomes a label).
	MaxTargetLength = 256
)

// ErrTooManyTargets is the error of a probe of a new target while
// MaxTargets targets are sampled.
var ErrTooManyTargets = errors.New("probe: too many targets")

// Options configures a Prober. The zero value probes with the exporter's
// defaults and no credentials.
type Options struct {
	// Modules name credentials and sampling settings; nil holds only an
	// empty default module.
	Modules *Modules
	// Sampling returns the options every target starts from (its module's
	// settings applied on top; Target and Name are set by the Prober). It
	// is called once per target started, so that each gets classifiers of
	// its own. Nil means exporter.Options{}.
	Sampling func() (exporter.Options, error)
	// IdleTimeout is how long a target is sampled without being probed;
	// default DefaultIdleTimeout. Set it well above the scrape interval.
	IdleTimeout time.Duration
	// MaxTargets bounds the targets sampled at once; default
	// DefaultMaxTargets.
	MaxTargets int
	// FirstWait bounds how long the first probe of a target waits for its
	// first sample (less when Prometheus's scrape timeout is shorter);
	// default DefaultFirstWait.
	FirstWait time.Duration
	// Clock tells when targets were probed and paces the idle check; nil
	// means the real clock. The targets' samplers use Sampling's Clock.
	Clock clockwork.Clock
	// Logger receives targets started and stopped; default slog.Default().
	Logger *slog.Logger
}

// Prober is an http.Handler serving /probe. It is safe for concurrent use.
type Prober struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	targets map[key]*target
	closed  bool

	// Probes answered without sampling, by reason (self-metrics).
	badRequests, overLimit atomic.Uint64
}

// key tells targets apart: one sampler per module and target.
type key struct{ module, target string }

// target is one probed target's sampler and the handler of its metrics.
type target struct {
	e       *exporter.Exporter
	metrics http.Handler
	// first is closed once the first sample is published.
	first chan struct{}
	// last is when the target was last probed (Unix nanoseconds).
	last   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Prober for opts. Call Run to stop idle targets, Close to
// stop every target.
func New(opts Options) (*Prober, error) {
	switch {
	case opts.IdleTimeout < 0:
		return nil, fmt.Errorf("probe: idle timeout must be positive, got %s", opts.IdleTimeout)
	case opts.MaxTargets < 0:
		return nil, fmt.Errorf("probe: max targets must be positive, got %d", opts.MaxTargets)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxTargets == 0 {
		opts.MaxTargets = DefaultMaxTargets
	}
	if opts.FirstWait <= 0 {
		opts.FirstWait = DefaultFirstWait
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Sampling == nil {
		opts.Sampling = func() (exporter.Options, error) { return exporter.Options{}, nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Prober{opts: opts, ctx: ctx, cancel: cancel, targets: map[key]*target{}}, nil
}

// ServeHTTP answers a probe: the target's latest sample, labelled
// target=<the target parameter>.
func (p *Prober) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	k := key{module: q.Get("module"), target: q.Get("target")}
	t, err := p.target(k)
	switch {
	case errors.Is(err, ErrTooManyTargets):
		p.overLimit.Add(1)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		p.badRequests.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t.last.Store(p.opts.Clock.Now().UnixNano())
	wait := time.NewTimer(p.firstWait(r))
	defer wait.Stop()
	select {
	case <-t.first:
	case <-wait.C:
	case <-r.Context().Done():
	}
	t.metrics.ServeHTTP(w, r)
}

// firstWait is how long a probe may wait for a first sample: FirstWait, or
// less than the scrape timeout Prometheus sends.
func (p *Prober) firstWait(r *http.Request) time.Duration {
	wait := p.opts.FirstWait
	if s, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && s > 0 {
		wait = min(wait, time.Duration(s*0.8*float64(time.Second)))
	}
	return wait
}

// target returns the target of k, starting its sampler on its first
// probe.
func (p *Prober) target(k key) (*target, error) {
	p.mu.Lock()
	t, ok := p.targets[k]
	p.mu.Unlock()
	if ok {
		return t, nil
	}
	opts, err := p.options(k)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.targets[k]; ok { // another probe started it meanwhile
		return t, nil
	}
	switch {
	case p.closed:
		return nil, errors.New("probe: shutting down")
	case len(p.targets) >= p.opts.MaxTargets:
		return nil, fmt.Errorf("%w: %d targets sampled, the most allowed (max targets); this one is not started", ErrTooManyTargets, len(p.targets))
	}
	t, err = p.start(opts)
	if err != nil {
		return nil, err
	}
	p.targets[k] = t
	p.opts.Logger.Info("probe target started", "target", k.target, "module", k.module, "targets", len(p.targets))
	return t, nil
}

// options checks k and builds its target's exporter options.
func (p *Prober) options(k key) (exporter.Options, error) {
	m, err := p.opts.Modules.lookup(k.module)
	if err != nil {
		return exporter.Options{}, fmt.Errorf("probe: %w", err)
	}
	tg, err := ParseTarget(k.target)
	if err != nil {
		return exporter.Options{}, err
	}
	base, err := p.opts.Sampling()
	if err != nil {
		return exporter.Options{}, fmt.Errorf("probe: sampling options: %w", err)
	}
	opts, err := m.options(base, tg)
	if err != nil {
		return exporter.Options{}, fmt.Errorf("probe: module %q: %w", k.module, err)
	}
	opts.Name = k.target
	opts.Logger = p.opts.Logger.With("target", k.target)
	return opts, nil
}

// start creates a target's exporter and starts sampling it.
func (p *Prober) start(opts exporter.Options) (*target, error) {
	e, err := exporter.New(opts)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(e); err != nil {
		_ = e.Close()
		return nil, fmt.Errorf("probe: %w", err)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	t := &target{e: e, first: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelError)})}
	t.last.Store(p.opts.Clock.Now().UnixNano())
	interval := opts.Sample.Interval
	if interval <= 0 {
		interval = exporter.DefaultOptions().Sample.Interval
	}
	go t.run(ctx, interval, opts.Clock)
	return t, nil
}

// run samples the target every interval until ctx is done, then closes
// its connections. It does what Exporter.Run does, and tells the first
// probe when the first sample is published.
func (t *target) run(ctx context.Context, interval time.Duration, clock clockwork.Clock) {
	defer close(t.done)
	defer t.e.Close()
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	tick := clock.NewTicker(interval)
	defer tick.Stop()
	for first := true; ; first = false {
		t.e.Sample(ctx)
		if first {
			close(t.first)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
	}
}

// Run stops the targets not probed for IdleTimeout, checking every tenth
// of it, until ctx is done; then it stops every target.
func (p *Prober) Run(ctx context.Context) error {
	defer p.Close()
	tick := p.opts.Clock.NewTicker(p.opts.IdleTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.Chan():
			p.stopIdle()
		}
	}
}

// stopIdle stops the targets not probed for IdleTimeout.
func (p *Prober) stopIdle() {
	cutoff := p.opts.Clock.Now().Add(-p.opts.IdleTimeout).UnixNano()
	var idle []*target
	p.mu.Lock()
	for k, t := range p.targets {
		if t.last.Load() <= cutoff {
			delete(p.targets, k)
			idle = append(idle, t)
			p.opts.Logger.Info("probe target stopped: not probed within the idle timeout", "target", k.target, "module", k.module,
				"idle_timeout", p.opts.IdleTimeout)
		}
	}
	p.mu.Unlock()
	stopAll(idle)
}

// Targets returns how many targets are sampled.
func (p *Prober) Targets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.targets)
}

// The Prober's self-metrics, from the catalog.
var (
	targetsDesc    = signals.ProbeTargets.Metric().Desc(nil)
	maxTargetsDesc = signals.ProbeMaxTargets.Metric().Desc(nil)
	refusedDesc    = signals.ProbeRefused.Metric().Desc(nil)
)

// Describe sends the descriptors of the Prober's self-metrics.
func (p *Prober) Describe(ch chan<- *prometheus.Desc) {
	ch <- targetsDesc
	ch <- maxTargetsDesc
	ch <- refusedDesc
}

// Collect sends the Prober's self-metrics: the targets sampled, the most
// allowed, and the probes refused by reason. A Prober registered on the
// exporter's /metrics makes "a target's probes are refused" visible where
// nothing else is scraped.
func (p *Prober) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(targetsDesc, prometheus.GaugeValue, float64(p.Targets()))
	ch <- prometheus.MustNewConstMetric(maxTargetsDesc, prometheus.GaugeValue, float64(p.opts.MaxTargets))
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(p.badRequests.Load()), signals.ProbeRefusedBadRequest)
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(p.overLimit.Load()), signals.ProbeRefusedMaxTargets)
}

// Close stops every target and waits for their connections to be closed;
// later probes of a new target are refused.
func (p *Prober) Close() error {
	p.mu.Lock()
	p.closed = true
	all := make([]*target, 0, len(p.targets))
	for k, t := range p.targets {
		all = append(all, t)
		delete(p.targets, k)
	}
	p.mu.Unlock()
	stopAll(all)
	p.cancel()
	return nil
}

// stopAll stops the targets' samplers and waits until each has closed its
// connections.
func stopAll(ts []*target) {
	for _, t := range ts {
		t.cancel()
	}
	for _, t := range ts {
		<-t.done
	}
}

// ErrBadTarget is the error of a target parameter that is not a Redis
// address or URL.
var ErrBadTarget = errors.New("probe: bad target")

// ParseTarget reads a probe's target parameter: redis://host:port[/db],
// rediss://… or host:port[/db]. It refuses a password (wrapping
// exporter.ErrPasswordInURL) and a user: credentials come from the module.
func ParseTarget(raw string) (exporter.Target, error) {
	switch {
	case raw == "":
		return exporter.Target{}, fmt.Errorf("%w: the target parameter is missing: want /probe?target=redis://host:port", ErrBadTarget)
	case len(raw) > MaxTargetLength:
		return exporter.Target{}, fmt.Errorf("%w: the target parameter is longer than %d bytes", ErrBadTarget, MaxTargetLength)
	}
	u := raw
	if !strings.Contains(raw, "://") && !strings.Contains(raw, "@") {
		u = "redis://" + raw
	}
	t, err := exporter.ParseURL(u)
	switch {
	case errors.Is(err, exporter.ErrPasswordInURL):
		return exporter.Target{}, fmt.Errorf("%w: %w: set password_file or password_env in the module", ErrBadTarget, err)
	case err != nil:
		return exporter.Target{}, fmt.Errorf("%w: %w", ErrBadTarget, err)
	case t.Username != "":
		return exporter.Target{}, fmt.Errorf("%w: the target must not carry a user: set username in the module", ErrBadTarget)
	}
	return t, nil
}
