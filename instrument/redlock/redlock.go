// Package redlock makes go-redsync/redsync mutexes (Redlock: a lock held by
// a quorum of independent Redis nodes) emit cachewatch's lock signals, so
// Redlock users get the same metrics, dashboards and alerts as users of
// instrument.Client.Lock.
//
// cachewatch does not implement Redlock itself: the quorum, drift and
// validity logic stay redsync's. The adapter runs the retry loop (one
// redsync TryLock per attempt, full-jitter backoff between attempts) so that
// every attempt is counted, and classifies redsync's errors into the
// instrument package's sentinels (instrument.ErrLockBusy, instrument.ErrRedis,
// instrument.ErrNotOwner), so callers branch the same way on both.
//
// The adapter marks the commands it sends through redsync as the instrument
// client marks its own, so a cachewatch hook on the same go-redis clients
// times them but leaves their lock outcomes to the adapter: each attempt is
// counted once, retries as retries. The Context of a held Mutex is not
// marked: the guarded work's commands are the hook's to count.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/backoff"
	"github.com/cachewatch/cachewatch/internal/ctxsleep"
	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/origin"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// Options configures a Redlock. The zero value is usable.
type Options struct {
	// Registerer receives the metrics; nil means prometheus.DefaultRegisterer
	// unless MeterProvider is set. It may be shared with instrument clients
	// and hooks.
	Registerer prometheus.Registerer
	// MeterProvider, when set, receives the same metrics as OpenTelemetry
	// instruments (as instrument.Options.MeterProvider); with Registerer
	// nil, only there.
	MeterProvider metric.MeterProvider
	// Name is the client label of the mutexes' series (default "default"),
	// as instrument.Options.Name is of an instrument client's.
	Name string
	// KeyGroups maps mutex names to key groups; nil means the registry's
	// shared default (keygroup.Shared).
	KeyGroups *keygroup.Classifier
	// Backoff bounds the retries of Mutex.Lock (full jitter). redsync's own
	// WithTries and WithRetryDelay options are not used: each attempt is one
	// TryLock. Retries: -1 tries once: the mutexes' attempts and
	// acquisitions are then labelled mode="try_once" (losing the race is the
	// design), which the contention and acquire-latency alerts leave out.
	Backoff instrument.Backoff
	// TracerProvider for spans. nil means no spans, as a nil MeterProvider
	// means no OpenTelemetry metrics: pass otel.GetTracerProvider() for the
	// global one.
	TracerProvider trace.TracerProvider
	// Logger receives one debug line per decision; nil means slog.Default().
	Logger *slog.Logger
	// Clock times durations, the backoff between attempts and the Renew
	// heartbeat; nil means the real clock. redsync computes a lock's
	// validity (Mutex.Until) on the real clock, so a fake clock should
	// start at the real time (clockwork.NewFakeClockAt(time.Now())).
	Clock clockwork.Clock
	// Renew keeps every held mutex alive until Unlock: a heartbeat extends
	// it on a quorum every third of its remaining validity. When an
	// extension finds it gone, or extensions fail until its validity has
	// passed, the lock is counted as lost and the mutex's Context is
	// cancelled with a cause wrapping instrument.ErrLockLost — at the end of
	// the validity, even if an extension is still waiting on a stalled node.
	Renew bool
}

// Redlock creates instrumented redsync mutexes.
type Redlock struct {
	rs      *redsync.Redsync
	groups  *keygroup.Classifier
	backoff instrument.Backoff
	renew   bool
	tracer  trace.Tracer
	log     *slog.Logger
	clock   clockwork.Clock
	holder  *lockholder.Identity // what each hold's value names (NewMutex)

	// Curried with Options.Name (attempts and acquire with the mode of
	// Options.Backoff too).
	attempts *emit.CounterVec
	acquire  *emit.HistogramVec
	hold     *emit.HistogramVec
	lost     *emit.CounterVec
	ends     *emit.CounterVec
	renewals *emit.CounterVec
	retries  *emit.CounterVec
	delays   *emit.HistogramVec
}

// New wraps rs, whose pools may use any redsync driver (go-redis, redigo,
// rueidis, valkey-go).
func New(rs *redsync.Redsync, opts Options) (*Redlock, error) {
	if rs == nil {
		return nil, errors.New("cachewatch: redlock.New: nil redsync")
	}
	sinks := emit.New(opts.Registerer, opts.MeterProvider, 0)
	r := &Redlock{rs: rs, groups: opts.KeyGroups, backoff: opts.Backoff, renew: opts.Renew, log: opts.Logger, clock: opts.Clock}
	name := opts.Name
	if name == "" {
		name = "default"
	}
	var err error
	counter := func(m signals.ID) *emit.CounterVec {
		c, e := sinks.Counter(m)
		if err = errors.Join(err, e); e != nil {
			return nil
		}
		return c.CurryWith(name)
	}
	histogram := func(m signals.ID) *emit.HistogramVec {
		h, e := sinks.Histogram(m)
		if err = errors.Join(err, e); e != nil {
			return nil
		}
		return h.CurryWith(name)
	}
	mode := map[string]string{signals.ModeLabel: signals.ModeWait}
	if opts.Backoff.Retries < 0 {
		mode[signals.ModeLabel] = signals.ModeTryOnce
	}
	r.attempts = counter(signals.LockAttempts).MustCurryWith(mode)
	r.acquire = histogram(signals.LockAcquireDuration).MustCurryWith(mode)
	r.hold = histogram(signals.LockHoldDuration)
	r.lost = counter(signals.LocksLost)
	r.ends = counter(signals.LockLeaseEnds)
	r.renewals = counter(signals.LockRenewals)
	r.retries = counter(signals.Retries)
	r.delays = histogram(signals.BackoffDelay)
	if r.groups == nil {
		r.groups = emit.SharedClassifier(sinks)
	}
	if err != nil {
		return nil, err
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	r.tracer = tp.Tracer("github.com/cachewatch/cachewatch/instrument/redlock")
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.clock == nil {
		r.clock = clockwork.NewRealClock()
	}
	r.holder = lockholder.NewIdentity(name)
	return r, nil
}

// NewMutex returns an instrumented mutex for name. options go to redsync
// (WithExpiry, WithDriftFactor, WithTimeoutFactor, …). Like a redsync
// mutex, one Mutex serves one holder at a time: give each goroutine its own.
//
// Each hold's value names its holder in the format of the instrument
// package's locks (service Options.Name, host, pid, process instance,
// acquisition time, around a random token), unless options give redsync a
// WithGenValueFunc of their own.
func (r *Redlock) NewMutex(name string, options ...redsync.Option) *Mutex {
	options = append([]redsync.Option{redsync.WithGenValueFunc(r.value)}, options...)
	m := &Mutex{r: r, mu: r.rs.NewMutex(name, options...), group: r.groups.Classify(name)}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	m.cancel(errNotHeld)
	return m
}

// value is the value of a hold: the holder's identity around a random
// token (lockholder), as instrument's locks hold.
func (r *Redlock) value() (string, error) {
	token, err := lockholder.NewToken()
	if err != nil {
		return "", fmt.Errorf("cachewatch: redlock: %w", err)
	}
	return r.holder.Value(token, r.clock.Now()), nil
}

// errNotHeld is the cause of a Mutex's Context before its first Lock;
// errReleased after Unlock.
var (
	errNotHeld  = errors.New("cachewatch: redlock not held")
	errReleased = errors.New("cachewatch: redlock released")
)

// Mutex is an instrumented redsync mutex.
type Mutex struct {
	r     *Redlock
	mu    *redsync.Mutex
	group string
	ops   sync.Mutex // a redsync Mutex is not safe for concurrent use: one call at a time

	state  sync.Mutex
	taken  time.Time // zero while not held
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed to end the heartbeat (Options.Renew)
	beat   chan struct{} // closed once the heartbeat has ended
}

// Name returns the mutex's name (its Redis key).
func (m *Mutex) Name() string { return m.mu.Name() }

// Value returns the random owner value of the current or last hold.
func (m *Mutex) Value() string { return m.mu.Value() }

// Until returns the end of the lock's validity as redsync computed it.
func (m *Mutex) Until() time.Time {
	m.ops.Lock()
	defer m.ops.Unlock()
	return m.mu.Until()
}

// Context returns a context with the values of the one given to Lock but
// not its deadline, done when the hold ends: cancelled by Unlock, or with
// a cause wrapping instrument.ErrLockLost when the lock is found lost (by
// Extend, Unlock or the Options.Renew heartbeat). Do the guarded work
// under it. Before the first Lock it is done already.
func (m *Mutex) Context() context.Context {
	m.state.Lock()
	defer m.state.Unlock()
	return m.ctx
}

// Lock takes the mutex on a quorum of nodes, retrying with full-jitter
// backoff while it is held elsewhere, never past ctx. It returns an error
// wrapping instrument.ErrLockBusy when the retries are spent,
// instrument.ErrRedis when no quorum could be reached for failures of the
// nodes, and ctx.Err() when ctx ended first.
func (m *Mutex) Lock(ctx context.Context) error {
	r := m.r
	ctx, span := r.tracer.Start(ctx, "cachewatch.redlock.lock",
		trace.WithAttributes(attribute.String("cachewatch.key_group", m.group)))
	defer span.End()
	start := r.clock.Now()
	policy := backoff.Policy(r.backoff).WithDefaults()
	retries := policy.Retries
	for attempt := 0; ; attempt++ {
		which := "first"
		if attempt > 0 {
			which = "retry"
			if err := m.wait(ctx, policy.Delay(attempt)); err != nil {
				return m.failed(ctx, span, start, "gave_up", fmt.Errorf("cachewatch: redlock %q: waiting to retry: %w", m.Name(), err))
			}
			r.retries.WithLabelValues(m.group).Inc()
		}
		m.ops.Lock()
		err := m.mu.TryLockContext(origin.Instrumented(ctx))
		m.ops.Unlock()
		result := classify(err)
		if ended := ctxsleep.Ended(ctx); result == "error" && ended != nil {
			// The caller's own deadline or cancellation cut the attempt
			// off: it gave up, as during the backoff; Redis gave no result
			// to count.
			return m.failed(ctx, span, start, "gave_up", fmt.Errorf("cachewatch: redlock %q: %w (%v)", m.Name(), ended, err))
		}
		r.attempts.WithLabelValues(m.group, result, which).Inc()
		r.logf(ctx, m, result, slog.Int("attempt", attempt+1))
		switch {
		case result == "acquired":
			m.hold(ctx)
			r.acquire.WithLabelValues(m.group, "acquired").Observe(r.clock.Since(start).Seconds())
			span.AddEvent("lease acquired")
			return nil
		case ctx.Err() != nil:
			return m.failed(ctx, span, start, "gave_up", fmt.Errorf("cachewatch: redlock %q: %w (%v)", m.Name(), ctx.Err(), err))
		case result == "error":
			return m.failed(ctx, span, start, "error", fmt.Errorf("%w: redlock %q: %w", instrument.ErrRedis, m.Name(), err))
		case attempt >= retries:
			return m.failed(ctx, span, start, "gave_up", fmt.Errorf("%w: redlock %q after %d attempts: %w", instrument.ErrLockBusy, m.Name(), attempt+1, err))
		}
	}
}

// classify names an attempt's result: acquired, busy (held on some node;
// worth a retry) or error (nodes failed, or the quorum came too late).
func classify(err error) string {
	if err == nil {
		return "acquired"
	}
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	if errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return "busy"
	}
	return "error"
}

func (m *Mutex) wait(ctx context.Context, d time.Duration) error {
	m.r.delays.WithLabelValues(m.group).Observe(d.Seconds())
	return ctxsleep.On(ctx, m.r.clock, d)
}

func (m *Mutex) failed(ctx context.Context, span trace.Span, start time.Time, outcome string, err error) error {
	m.r.acquire.WithLabelValues(m.group, outcome).Observe(m.r.clock.Since(start).Seconds())
	m.r.logf(ctx, m, outcome)
	span.SetStatus(codes.Error, outcome)
	return err
}

// Unlock releases the mutex on every node. It returns an error wrapping
// instrument.ErrNotOwner when no quorum still held our value (the lock is
// then counted as lost: expired past Until, otherwise not_owner), and
// instrument.ErrRedis when nodes failed.
func (m *Mutex) Unlock(ctx context.Context) error {
	r := m.r
	ctx, span := r.tracer.Start(ctx, "cachewatch.redlock.unlock",
		trace.WithAttributes(attribute.String("cachewatch.key_group", m.group)))
	defer span.End()
	m.endHeartbeat()
	m.ops.Lock()
	ok, err := m.mu.UnlockContext(origin.Instrumented(ctx))
	m.ops.Unlock()
	m.state.Lock()
	defer m.state.Unlock()
	defer m.cancel(errReleased) // no effect if the loss came first
	held := !m.taken.IsZero()
	switch {
	case ok:
		m.ended(signals.EndReleased)
		span.AddEvent("lease released")
		r.logf(ctx, m, "released")
		return nil
	case isNotOwner(err) || err == nil:
		if held {
			m.lose(ctx, span)
		}
		return fmt.Errorf("%w: redlock %q: %v", instrument.ErrNotOwner, m.Name(), err)
	}
	m.ended(signals.EndReleaseFailed)
	r.logf(ctx, m, "release_error")
	return fmt.Errorf("%w: redlock %q unlock: %w", instrument.ErrRedis, m.Name(), err)
}

// Extend resets the lock's expiry on a quorum of nodes. It returns an error
// wrapping instrument.ErrNotOwner when the quorum no longer holds our value
// (counted as lost) and instrument.ErrRedis when nodes failed.
func (m *Mutex) Extend(ctx context.Context) error {
	r := m.r
	m.ops.Lock()
	ok, err := m.mu.ExtendContext(origin.Instrumented(ctx))
	m.ops.Unlock()
	switch {
	case ok:
		r.renewals.WithLabelValues(m.group, "renewed").Inc()
		r.logf(ctx, m, "renewed")
		return nil
	case classify(err) == "busy" || errors.Is(err, redsync.ErrExtendFailed) || err == nil:
		r.renewals.WithLabelValues(m.group, "lost").Inc()
		m.state.Lock()
		if !m.taken.IsZero() {
			m.lose(ctx, trace.SpanFromContext(ctx))
		}
		m.state.Unlock()
		return fmt.Errorf("%w: redlock %q extend: %v", instrument.ErrNotOwner, m.Name(), err)
	}
	r.renewals.WithLabelValues(m.group, "error").Inc()
	r.logf(ctx, m, "renew_error")
	return fmt.Errorf("%w: redlock %q extend: %w", instrument.ErrRedis, m.Name(), err)
}

// lose counts a lost lock: expired when redsync's validity had passed,
// otherwise not_owner. m.state is held.
func (m *Mutex) lose(ctx context.Context, span trace.Span) {
	reason := "not_owner"
	if !m.r.clock.Now().Before(m.Until()) {
		reason = "expired"
	}
	m.loseFor(ctx, span, reason)
}

// loseFor counts a lost lock and ends its hold's Context. m.state is held.
func (m *Mutex) loseFor(ctx context.Context, span trace.Span, reason string) {
	end := signals.EndExpired
	switch reason {
	case "renew_failed":
		end = signals.EndLost
	case "not_owner":
		end = signals.EndTakenOver
	}
	m.ended(end)
	m.cancel(fmt.Errorf("%w: %s", instrument.ErrLockLost, reason))
	m.r.lost.WithLabelValues(m.group, reason).Inc()
	span.AddEvent("lease lost", trace.WithAttributes(attribute.String("cachewatch.lock.reason", reason)))
	m.r.logf(ctx, m, "lost_"+reason)
}

// ended counts the end of the current hold, once: its outcome and hold
// time. m.state is held.
func (m *Mutex) ended(outcome string) {
	if m.taken.IsZero() {
		return
	}
	m.r.ends.WithLabelValues(m.group, outcome).Inc()
	m.r.hold.WithLabelValues(m.group, outcome).Observe(m.r.clock.Since(m.taken).Seconds())
	m.taken = time.Time{}
}

func isNotOwner(err error) bool {
	return errors.Is(err, redsync.ErrLockAlreadyExpired) || classify(err) == "busy"
}

// logf writes one debug line per decision; the owner value is shortened.
func (r *Redlock) logf(ctx context.Context, m *Mutex, outcome string, extra ...slog.Attr) {
	if !r.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	token := strings.TrimPrefix(m.mu.Value(), lockholder.Version+"|")
	if len(token) > 8 {
		token = token[:8]
	}
	attrs := append([]slog.Attr{slog.String("key_group", m.group), slog.String("key", m.Name()),
		slog.String("token", token), slog.String("outcome", outcome)}, extra...)
	r.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch redlock", attrs...)
}

// hold records an acquired lock: its start, its Context, and (Options.Renew)
// its heartbeat.
func (m *Mutex) hold(ctx context.Context) {
	m.state.Lock()
	defer m.state.Unlock()
	m.taken = m.r.clock.Now()
	m.cancel(errReleased) // a previous hold's, if Unlock was skipped
	m.ctx, m.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if m.r.renew {
		m.stop, m.beat = make(chan struct{}), make(chan struct{})
		go m.heartbeat(m.ctx, m.stop, m.beat)
	}
}

// endHeartbeat stops the heartbeat, if any, and waits for it to end.
func (m *Mutex) endHeartbeat() {
	m.state.Lock()
	stop, beat := m.stop, m.beat
	m.stop, m.beat = nil, nil
	m.state.Unlock()
	if stop != nil {
		close(stop)
		<-beat
	}
}

// heartbeat extends the lock every third of its remaining validity until
// stop closes or the lock is lost: found gone by an extension (counted by
// Extend), or not extended by the end of its validity (renew_failed) —
// decided then, not when a stalled extension returns, because from then on
// another process may take the lock.
func (m *Mutex) heartbeat(ctx context.Context, stop <-chan struct{}, beat chan<- struct{}) {
	defer close(beat)
	for {
		until := m.Until()
		t := m.r.clock.NewTimer(max(m.r.clock.Until(until)/3, time.Millisecond))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.Chan():
		}
		extended := make(chan error, 1)
		go func() { extended <- m.Extend(ctx) }()
		expiry := m.r.clock.NewTimer(m.r.clock.Until(until))
		var err error
		select {
		case err = <-extended:
			expiry.Stop()
		case <-expiry.Chan():
			m.giveUp(ctx)
			<-extended // a late success or loss is not counted twice: the hold has ended
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, instrument.ErrNotOwner):
			return
		case !m.r.clock.Now().Before(until):
			m.giveUp(ctx)
			return
		}
	}
}

// giveUp ends a hold whose validity passed without an extension.
func (m *Mutex) giveUp(ctx context.Context) {
	m.state.Lock()
	defer m.state.Unlock()
	if !m.taken.IsZero() {
		m.loseFor(ctx, trace.SpanFromContext(ctx), "renew_failed")
	}
}
