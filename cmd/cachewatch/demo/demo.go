// Package demo runs cachewatch's demonstration: a small fleet of simulated
// service instances reads a few hot keys that expire, first unprotected
// (naive cache-aside, a hand-written SET NX lock with polling waiters, plain
// writes), then on cachewatch (lease + stale-while-revalidate cache, renewed
// lease locks, versioned writes). Hooks on every client and the exporter
// sampling the same Redis feed one Prometheus registry; the report reads each
// figure back from those metrics, next to what the demo counted itself.
//
// By default the Redis is an embedded miniredis in the same process, so the
// demo needs nothing but Go; Options.RedisURL points it at a real server.
package demo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/keygroup"
)

// Defaults for the zero values of Options.
const (
	DefaultDuration  = 36 * time.Second
	DefaultInstances = 6
	DefaultCallers   = 4
	DefaultKeys      = 4
	DefaultFreshTTL  = 2 * time.Second
)

// ErrBadOptions wraps every invalid option; ErrRedisUnreachable a Redis the
// demo could not reach.
var (
	ErrBadOptions       = errors.New("invalid option")
	ErrRedisUnreachable = errors.New("Redis unreachable")
)

// Options configures a run. The zero value runs the default demo on an
// embedded miniredis with a fresh registry.
type Options struct {
	// RedisURL is redis://[user@]host:port[/db] (rediss:// for TLS) of a
	// real Redis; empty means an embedded miniredis. The demo writes only
	// keys under "cwdemo:" and removes them when a phase ends.
	RedisURL string
	// Password for RedisURL; never part of the URL.
	Password string
	// Duration of the whole run, both phases (default 36s, at least 4s).
	Duration time.Duration
	// Phase, when set, runs that phase only (PhaseUnprotected or
	// PhaseCachewatch) for the whole Duration: a fleet on cachewatch to
	// watch on dashboards and alerts for as long as you like, say.
	Phase string
	// Instances is the number of simulated service instances (default 6),
	// Callers the concurrent callers in each (default 4), Keys the number
	// of hot keys (default 4).
	Instances, Callers, Keys int
	// FreshTTL is how long a cached value is fresh (default 2s).
	FreshTTL time.Duration
	// Registry receives every metric; nil means a new one (Report does not
	// need it). Serve it to watch the run.
	Registry *prometheus.Registry
	// Announce, when set, is called once the Redis is ready, with what the
	// run uses ("embedded miniredis …" or "Redis at host:port") and a URL
	// other commands reach it by (redis://host:port, or RedisURL as given:
	// never a password), such as `cachewatch locks --redis.url`.
	Announce func(server, url string)
	// Progress, when set, is called every half second with the live figures.
	Progress func(Progress)

	// retryHorizon is the hooks' RetryHorizon, and how long a phase's end
	// waits for their busy first attempts to settle; 0 means
	// hooks.DefaultRetryHorizon. A waiting caller stalled past the horizon
	// between a busy attempt and its retry is counted by the hook, and so
	// by the demo, as a try-once caller and a new one; tests lengthen it
	// so that the waiting callers they look for stay waiting.
	retryHorizon time.Duration
	// holdPhase, when set, is called once a phase's time is up, with its
	// name, before its fleet stops: the fleet runs on until it returns.
	// Tests wait there for what they observe of a running phase.
	holdPhase func(phase string)
}

// Progress is the state of a run at one moment, counted as the report
// counts it.
type Progress struct {
	Phase          string
	PhaseIndex     int // from 1
	Phases         int // how many the run has: 2, or 1 with Options.Phase
	Elapsed, Total time.Duration
	Requests       int64
	DatabaseCalls  int64
	Refreshes      int64
	// WaitBusy of WaitFirst: the first attempts of callers that wait for a
	// lock, and how many found it held (the report's first-try lock
	// contention; the periodic job's try-once lock is left out).
	WaitBusy, WaitFirst int64
	LocksLost           int64
	// OlderLanded counts writes of an older version that replaced a newer
	// value (the report's older writes that landed; refused ones are not).
	OlderLanded int64
}

func (o *Options) defaults() error {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Instances == 0 {
		o.Instances = DefaultInstances
	}
	if o.Callers == 0 {
		o.Callers = DefaultCallers
	}
	if o.Keys == 0 {
		o.Keys = DefaultKeys
	}
	if o.FreshTTL == 0 {
		o.FreshTTL = DefaultFreshTTL
	}
	switch {
	case o.Duration < 4*time.Second:
		return fmt.Errorf("%w: --duration %v is under 4s", ErrBadOptions, o.Duration)
	case o.Instances < 1 || o.Instances > 64:
		return fmt.Errorf("%w: --instances %d not in 1..64", ErrBadOptions, o.Instances)
	case o.Callers < 1 || o.Callers > 64:
		return fmt.Errorf("%w: --callers %d not in 1..64", ErrBadOptions, o.Callers)
	case o.Keys < 1 || o.Keys > 1000:
		return fmt.Errorf("%w: --keys %d not in 1..1000", ErrBadOptions, o.Keys)
	case o.FreshTTL < 100*time.Millisecond:
		return fmt.Errorf("%w: fresh TTL %v is under 100ms", ErrBadOptions, o.FreshTTL)
	case o.Phase != "" && o.Phase != PhaseUnprotected && o.Phase != PhaseCachewatch:
		return fmt.Errorf("%w: --phase %q is neither %s nor %s", ErrBadOptions, o.Phase, PhaseUnprotected, PhaseCachewatch)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.retryHorizon == 0 {
		o.retryHorizon = hooks.DefaultRetryHorizon
	}
	return nil
}

// redisTarget is the Redis the run uses.
type redisTarget struct {
	opts     *redis.Options
	server   string // what the report calls it
	url      string // how other commands reach it
	embedded bool
	close    func()
}

// connect starts the embedded miniredis or checks the real Redis is
// reachable.
func connect(ctx context.Context, o Options) (*redisTarget, error) {
	if o.RedisURL == "" {
		m := miniredis.NewMiniRedis()
		// TTLs follow the wall clock, as on a real server (miniredis
		// otherwise only expires keys on FastForward).
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		return &redisTarget{opts: &redis.Options{Addr: m.Addr()}, embedded: true, url: "redis://" + m.Addr(),
			server: "embedded miniredis (in this process, " + m.Addr() + ")", close: m.Close}, nil
	}
	t, err := exporter.ParseURL(o.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("%w: --redis: %w", ErrBadOptions, err)
	}
	ro := &redis.Options{Addr: t.Addrs[0], Username: t.Username, DB: t.DB, TLSConfig: t.TLS,
		DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout}
	ro.Password = o.Password
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c := redis.NewClient(ro)
	defer c.Close()
	if err := c.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrRedisUnreachable, ro.Addr, err)
	}
	return &redisTarget{opts: ro, server: "Redis at " + ro.Addr, url: o.RedisURL, close: func() {}}, nil
}

func (t *redisTarget) exporterTarget() exporter.Target {
	var tlsConf *tls.Config
	if t.opts.TLSConfig != nil {
		tlsConf = t.opts.TLSConfig.Clone()
	}
	return exporter.Target{Addrs: []string{t.opts.Addr}, Username: t.opts.Username, Password: t.opts.Password,
		DB: t.opts.DB, TLS: tlsConf, Mode: exporter.ModeStandalone}
}

// Run runs both phases and returns the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	target, err := connect(ctx, o)
	if err != nil {
		return nil, err
	}
	defer target.close()

	e, err := newEnv(target, o)
	if err != nil {
		return nil, err
	}
	if o.Announce != nil {
		o.Announce(target.server, target.url)
	}

	admin := redis.NewClient(target.opts)
	defer admin.Close()
	if err := cleanup(ctx, admin); err != nil {
		return nil, err
	}

	exp, stopExporter, err := startExporter(ctx, o.Registry, target, e.groups, e.quiet)
	if err != nil {
		return nil, err
	}

	rep := &Report{Server: target.server, Embedded: target.embedded, Instances: o.Instances,
		CallersPerInstance: o.Callers, Keys: o.Keys, FreshTTL: o.FreshTTL.String()}
	specs := phases(o.Phase)
	for i, spec := range specs {
		spec.instances, spec.callers, spec.keys, spec.duration = o.Instances, o.Callers, o.Keys, o.Duration/time.Duration(len(specs))
		pr, err := runMeasured(ctx, e, spec, i+1, o)
		if err != nil {
			stopExporter()
			return nil, err
		}
		rep.Phases = append(rep.Phases, pr)
		if err := cleanup(ctx, admin); err != nil {
			stopExporter()
			return nil, err
		}
	}
	stopExporter()
	rep.Exporter = exporterSummary(exp, target.embedded)
	rep.Queries = chartQueries()
	rep.Notes = append(rep.Notes, coldStartNotes(rep, o.Instances*o.Callers)...)
	if target.embedded {
		rep.Notes = append(rep.Notes, "caller latency on the embedded miniredis includes a Lua interpreter started for every "+
			"script call the cachewatch client makes, one at a time, and this machine's load; run with --redis for latency figures")
	}
	return rep, nil
}

// newEnv returns what both phases share on target.
func newEnv(target *redisTarget, o Options) (*env, error) {
	// The demo's keys are its own and name no one: their groups are kept
	// from the first key (MinKeys 1) rather than learnt from many.
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	if err != nil {
		return nil, fmt.Errorf("key groups: %w", err)
	}
	return &env{
		newClient: func() *redis.Client { return redis.NewClient(target.opts) },
		reg:       o.Registry, groups: groups, quiet: slog.New(slog.NewTextHandler(io.Discard, nil)), freshTTL: o.FreshTTL,
		db: newDatabase(defaultLatency, o.FreshTTL/2),
		// Round trips get 2s (the client's default is 250ms): the embedded
		// miniredis starts a Lua interpreter for every script call, and a
		// demo runs on busy laptops and CI machines.
		redisTimeout: 2 * time.Second,
		retryHorizon: o.retryHorizon,
		holdPhase:    o.holdPhase,
		versions:     newVersions(),
	}, nil
}

// ShortRunWarning says, in two lines, why a run whose phases last less
// than five fresh TTLs cannot show the steady state, or returns "" when
// they are long enough. phase is Options.Phase.
func ShortRunWarning(duration time.Duration, phase string) string {
	n := time.Duration(len(phases(phase)))
	each, enough := duration/n, 5*DefaultFreshTTL
	if each >= enough {
		return ""
	}
	return fmt.Sprintf("warning: %v per phase is too short for the steady state: the cold start weighs on\n"+
		"every figure, on cachewatch's p99 most; use --duration %v or more", each, n*enough)
}

// coldStartNotes explains caller p99s that the cold start may decide:
// every caller's first request waits for a first load, and when those are
// more than 1% of a phase's requests its p99 can be one of them.
func coldStartNotes(r *Report, callers int) []string {
	var short []string
	var requests []string
	for _, p := range r.Phases {
		if int64(callers)*100 > p.Requests {
			short = append(short, p.Name)
			requests = append(requests, fmt.Sprint(p.Requests))
		}
	}
	if len(short) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("the caller p99 of %s is the cold start's, not the steady state's: the first requests of the %d "+
		"callers, each waiting for a first load, are over 1%% of the %s requests; run with a longer --duration",
		strings.Join(short, " and "), callers, strings.Join(requests, " and "))}
}

// phases are the phases a run goes through: both, or the one named.
func phases(only string) []phaseSpec {
	all := []phaseSpec{
		{name: PhaseUnprotected, newInst: newUnprotected},
		{name: PhaseCachewatch, newInst: newProtected},
	}
	if only == "" {
		return all
	}
	return slices.DeleteFunc(all, func(p phaseSpec) bool { return p.name != only })
}

// cleanup removes the demo's keys (SCAN + UNLINK, never KEYS or FLUSHDB: the
// Redis may hold other data).
func cleanup(ctx context.Context, rdb *redis.Client) error {
	iter := rdb.Scan(ctx, 0, keyPrefix+"*", 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return fmt.Errorf("clean up demo keys: %w", err)
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("clean up demo keys: %w", err)
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("clean up demo keys: %w", err)
		}
	}
	return nil
}

// runMeasured runs one phase between two gatherings of the registry and
// builds its report from the difference and the demo's own counts.
func runMeasured(ctx context.Context, e *env, spec phaseSpec, index int, o Options) (PhaseReport, error) {
	t := &truth{}
	t.latency.start = time.Now()
	e.current.Store(t)
	e.db.newPhase()
	dbBefore := e.db.counts()
	before, err := gather(o.Registry)
	if err != nil {
		return PhaseReport{}, err
	}
	jobGroup := e.groups.Classify(jobLockKey)
	base := readSignals(before, jobGroup)
	var timeline []Point
	tick := func(elapsed time.Duration) {
		snap, err := gather(o.Registry)
		if err != nil {
			return
		}
		sig := readSignals(snap, jobGroup).minus(base)
		db := e.db.counts()
		timeline = append(timeline, Point{T: elapsed.Seconds(),
			LoaderCallsMetric: loaderCalls(spec.name, sig), LoaderCallsTruth: float64(db.calls - dbBefore.calls)})
		if o.Progress != nil {
			o.Progress(Progress{Phase: spec.name, PhaseIndex: index, Phases: len(phases(o.Phase)),
				Elapsed: time.Duration(index-1)*spec.duration + elapsed, Total: o.Duration,
				Requests:      t.requests.Load(),
				DatabaseCalls: db.calls - dbBefore.calls, Refreshes: db.refreshes - dbBefore.refreshes,
				WaitBusy: t.firstBusy.Load() - t.jobBusy.Load(), WaitFirst: t.firstAttempts.Load() - t.jobTries.Load(),
				LocksLost: t.locksLost.Load(), OlderLanded: t.olderLanded.Load()})
		}
	}
	if err := runPhase(ctx, e, spec, tick); err != nil {
		return PhaseReport{}, err
	}
	if err := settleRetries(ctx, o.Registry, o.retryHorizon); err != nil {
		return PhaseReport{}, err
	}
	after, err := gather(o.Registry)
	if err != nil {
		return PhaseReport{}, err
	}
	db := e.db.counts()
	return buildPhase(spec, readSignals(after, jobGroup).minus(base), t, dbCounts{
		calls: db.calls - dbBefore.calls, refreshes: db.refreshes - dbBefore.refreshes,
		stampedes: db.stampedes - dbBefore.stampedes}, timeline), nil
}

// settleRetries waits out the hooks' retry horizon and scrapes once, so
// that every busy first lock attempt of the phase has been counted (a hook
// counts one once it is retried or its horizon has passed without a retry,
// which a scrape settles).
func settleRetries(ctx context.Context, reg *prometheus.Registry, horizon time.Duration) error {
	t := time.NewTimer(horizon + 100*time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	_, err := gather(reg)
	return err
}

// startExporter samples the demo's Redis every second into the registry.
func startExporter(ctx context.Context, reg *prometheus.Registry, t *redisTarget, groups *keygroup.Classifier, quiet *slog.Logger) (*exporter.Exporter, func(), error) {
	exp, err := exporter.New(exporter.Options{
		Target:    t.exporterTarget(),
		KeyGroups: groups,
		Logger:    quiet,
		Sample:    exporter.SampleOptions{Interval: time.Second, MaxDuration: 200 * time.Millisecond},
		Locks:     exporter.LockOptions{Patterns: []string{LockPattern}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("exporter: %w", err)
	}
	if err := reg.Register(exp); err != nil {
		exp.Close()
		return nil, nil, fmt.Errorf("register exporter: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = exp.Run(ctx)
	}()
	return exp, func() { cancel(); <-done }, nil
}
