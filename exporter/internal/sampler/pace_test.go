package sampler

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// scanLog records when (on the pacing clock, since start) each lock-pass
// SCAN … MATCH and each INFO was sent.
type scanLog struct {
	clock  clockwork.Clock
	start  time.Time
	mu     sync.Mutex
	at     []time.Duration
	infoAt []time.Duration
}

func (l *scanLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *scanLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *scanLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		switch args := cmd.Args(); {
		case cmd.Name() == "scan" && len(args) > 2 && args[2] == "match":
			l.at = append(l.at, l.clock.Since(l.start))
		case cmd.Name() == "info":
			l.infoAt = append(l.infoAt, l.clock.Since(l.start))
		}
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (l *scanLog) calls() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.at...)
}

func (l *scanLog) infos() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.infoAt...)
}

// between counts the times in [from, to).
func between(ts []time.Duration, from, to time.Duration) int {
	n := 0
	for _, t := range ts {
		if t >= from && t < to {
			n++
		}
	}
	return n
}

// driveSample runs e.Sample and advances the fake pacing clock 1 ms at a
// time, only while every pass in progress waits on it: the lock pass and the
// whole-keyspace pass until the lock pass has published its figures, then
// the whole-keyspace pass. Their own work then takes no time on the pacing
// clock, which shows the pacing alone; wall time only polls.
func driveSample(t *testing.T, e *Sampler, fc *clockwork.FakeClock) *snapshot.Node {
	t.Helper()
	return driveSampleWith(t, e, fc, func() int {
		if p := e.Snapshots()[0].Pass; p != nil && !p.LockPassEnded.IsZero() {
			return 1
		}
		return 2
	})
}

// driveSampleWith is driveSample with the number of passes that wait on the
// pacing clock told by waiters.
func driveSampleWith(t *testing.T, e *Sampler, fc *clockwork.FakeClock, waiters func() int) *snapshot.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan *snapshot.Node, 1)
	go func() { done <- e.Sample(ctx)[0] }()
	for {
		select {
		case s := <-done:
			return s
		default:
		}
		passes := waiters()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if fc.BlockUntilContext(wctx, passes) == nil {
			fc.Advance(time.Millisecond)
		}
		wcancel()
		if ctx.Err() != nil {
			t.Fatal("the sample did not end")
		}
	}
}

// The lock pass is paced by the pacing clock, not wall time: its SCAN … MATCH
// calls never run ahead (by more than minPaceSleep) of the rate derived from
// the key count (INFO keyspace) and the interval, the pass is spread over
// its share of the interval (not rushed), it still ends within the interval,
// and the lock figures it publishes are exact.
func TestLockPassPacedOverInterval(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const keys, locks = 20_000, 400
	pipe := rdb.Pipeline()
	for i := range keys {
		switch {
		case i < locks/2:
			pipe.Set(ctx, "lock:job:"+strconv.Itoa(i), "tok", time.Hour)
		case i < locks:
			pipe.Set(ctx, "lock:job:"+strconv.Itoa(i), "tok", 0)
		default:
			pipe.Set(ctx, "cache:"+strconv.Itoa(i), "v", time.Hour)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	fc := clockwork.NewFakeClock()
	const interval = time.Second
	cfg := testConfig(t, srv.Addr)
	cfg.Interval, cfg.Notify, cfg.Clock, cfg.Pacer = interval, NotifyOff, fc, fc
	e := newTestSampler(t, cfg)
	nodes := e.refreshNodes(ctx)
	log := &scanLog{clock: fc, start: fc.Now()}
	nodes[0].env.rdb.AddHook(log)

	s := driveSample(t, e, fc)
	if !s.Up || s.Pass == nil || s.Pass.LockPassEnded.IsZero() {
		t.Fatalf("no complete lock pass: up=%v err=%v errors=%v", s.Up, s.Err, s.Errors)
	}
	g := s.Pass.Groups["lock:job:*"]
	if g == nil || g.Locks != locks || g.LocksNoTTL != locks/2 {
		t.Fatalf("lock figures not exact: %+v", g)
	}
	// 20,000 keys spread over half of a 1 s interval: 40,000 keys/s.
	rate := nodes[0].locks.scanRate()
	if want := float64(keys) / (interval.Seconds() * lockPassShare); rate != want {
		t.Fatalf("lock scan rate %v keys/s, want %v", rate, want)
	}
	calls := log.calls()
	if len(calls) < keys/DefaultLockScanCount/2 {
		t.Fatalf("only %d SCAN … MATCH calls", len(calls))
	}
	for i, at := range calls {
		due := time.Duration(float64(i*DefaultLockScanCount) / rate * float64(time.Second))
		if at < due-minPaceSleep-time.Microsecond { // it sleeps once minPaceSleep ahead
			t.Fatalf("SCAN %d of %d sent %v after the start, before its pace allows (%v)", i, len(calls), at, due)
		}
	}
	if infos := log.infos(); len(infos) > 1 {
		t.Fatalf("INFO sent at %v of the pacing clock: a pass its key count paces (not the budget) sent more than the info stage's", infos)
	}
	took := s.Pass.LockPassEnded.Sub(s.Pass.LockPassStarted)
	t.Logf("lock pass: %d SCAN … MATCH calls over %v of the pacing clock, at most %.0f keys/s", len(calls), took, rate)
	if spread := time.Duration(float64(interval) * lockPassShare); took < spread*3/4 || took > interval {
		t.Fatalf("lock pass took %v of the pacing clock for %d SCAN calls, want it spread over about %v and within the %v interval",
			took, len(calls), spread, interval)
	}
}

// A pass paced at the budget measures the server's cost per key within
// costRefresh instead of keeping the default estimate for the sample (the
// info stage's one INFO reading is only the baseline), and from then on
// follows the budget at the measured cost; it reads INFO at most once per
// costRefresh.
func TestLockPassMeasuresItsCost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, "DEBUG", "POPULATE", 300_000, "key", 10).Err(); err != nil {
		t.Fatal(err)
	}
	fc := clockwork.NewFakeClock()
	cfg := testConfig(t, srv.Addr)
	// 300,000 keys within 90 % of MaxDuration would be 222,222 keys/s; 2 %
	// of the server's time (2.5 % within MaxDuration) at the default 1.5 µs
	// per key is 16,667: more than an estimate needs in costRefresh.
	cfg.Interval, cfg.MaxDuration, cfg.LockScanBudget = 10*time.Second, 1500*time.Millisecond, 0.02
	cfg.Notify, cfg.Clock, cfg.Pacer = NotifyOff, fc, fc
	// The whole-keyspace pass reads one page without waiting on the
	// pacing clock: only the lock pass waits on it.
	cfg.MaxKeys, cfg.KeysPerSecond = cfg.ScanCount, 1e9
	e := newTestSampler(t, cfg)
	nodes := e.refreshNodes(ctx)
	log := &scanLog{clock: fc, start: fc.Now()}
	nodes[0].env.rdb.AddHook(log)
	l := &nodes[0].locks

	driveSampleWith(t, e, fc, func() int { return 1 })
	est := nodes[0].env.scanCost.est
	if est == 0 {
		t.Fatal("the pass kept the default cost per key: no estimate measured within the sample")
	}
	// The first INFO is the info stage's; the pass's follow, one per
	// costRefresh of its pacing clock at most.
	infos := log.infos()
	if len(infos) < 2 || len(infos) > 1+int(cfg.MaxDuration/costRefresh) {
		t.Fatalf("INFO sent at %v of the pacing clock: want the info stage's and one per %v of the pass", infos, costRefresh)
	}
	measured := infos[1]
	calls := log.calls()
	share := l.scanShare()
	defaultRate, rate := share/defaultScanCost.Seconds(), l.scanRate()
	if want := share / est.Seconds(); rate != want {
		t.Fatalf("pace %v keys/s after the estimate of %v per key, want the budget's %v", rate, est, want)
	}
	// Each pace allows minPaceSleep of calls ahead, and one call's rounding.
	within := func(n int, perSecond float64, d time.Duration) bool {
		want := perSecond * d.Seconds() / DefaultLockScanCount
		slack := perSecond*minPaceSleep.Seconds()/DefaultLockScanCount + 2
		return math.Abs(float64(n)-want) <= slack
	}
	if n := between(calls, 0, measured); !within(n, defaultRate, measured) {
		t.Errorf("%d SCAN calls before the estimate (%v of the pacing clock), want %.0f keys/s", n, measured, defaultRate)
	}
	end := min(cfg.MaxDuration, measured+costRefresh)
	if n := between(calls, measured, end); !within(n, rate, end-measured) {
		t.Errorf("%d SCAN calls over %v after the estimate of %v per key, want %.0f keys/s", n, end-measured, est, rate)
	}
	t.Logf("estimate %v per key after %v: %.0f keys/s (%.0f at the default); %d SCAN calls, INFO at %v",
		est, measured, rate, defaultRate, len(calls), infos)
}

// The lock pass's pace follows the key count and the options.
func TestLockScanRate(t *testing.T) {
	cfg := testConfig(t, "127.0.0.1:1")
	v := &env{cfg: &cfg, facts: facts{dbKeys: 1_000_000, dbKnown: true}}
	l := &lockStage{env: v}
	// 1,000,000 keys over min(half of 15 s, 90 % of 13 s) = 7.5 s.
	if got, want := l.scanRate(), 1e6/7.5; got < want*0.999 || got > want*1.001 {
		t.Errorf("1M keys: %v keys/s, want %v", got, want)
	}
	// 10,000,000 keys would need 1.33M keys/s: the budget caps it. 20 %
	// of the server's time over each 15 s interval, spent within the 13 s
	// of a sample: 23.1 % while the pass runs, at 1.5 µs per key until
	// measured, 153,846 keys/s.
	v.facts.dbKeys = 10_000_000
	budget := DefaultLockScanBudget * 15 / 13 / defaultScanCost.Seconds()
	if got := l.scanRate(); math.Abs(got-budget) > 1e-6 {
		t.Errorf("10M keys: %v keys/s, want the budget's %v", got, budget)
	}
	v.scanCost.est = 500 * time.Nanosecond // a measured cost: 461,538 keys/s
	if got := l.scanRate(); math.Abs(got-DefaultLockScanBudget*15/13/0.5e-6) > 1e-6 {
		t.Errorf("10M keys at 0.5 µs per key: %v keys/s", got)
	}
	v.scanCost.est = 0
	// With notifications: the sync at the budget, then reconciling passes
	// over LockReconcile.
	l.feed = &lockFeed{}
	if got := l.scanRate(); math.Abs(got-budget) > 1e-6 {
		t.Errorf("sync: %v keys/s, want %v", got, budget)
	}
	if got := l.scanCount(); got != DefaultLockScanCount {
		t.Errorf("sync: COUNT %d, want the lock pass's %d", got, DefaultLockScanCount)
	}
	l.index.synced = true
	// 10,000,000 keys over 4 hours would be 694 keys/s: the floor keeps
	// the pass moving; 40,000,000 are paced over LockReconcile.
	if got := l.scanRate(); got != floorLockScanRate {
		t.Errorf("reconcile: %v keys/s, want the floor %v", got, float64(floorLockScanRate))
	}
	v.facts.dbKeys = 40_000_000
	if got, want := l.scanRate(), 40e6/DefaultLockReconcile.Seconds(); got != want {
		t.Errorf("reconcile of 40M keys: %v keys/s, want %v", got, want)
	}
	v.facts.dbKeys = 10_000_000
	if got := l.scanCount(); got != DefaultScanCount {
		t.Errorf("reconcile: COUNT %d, want the whole-keyspace pass's %d", got, DefaultScanCount)
	}
	l.feed, l.index.synced = nil, false
	v.facts.dbKeys = 1000
	if got := l.scanRate(); got != minLockScanRate {
		t.Errorf("small keyspace: %v keys/s, want the minimum %v", got, float64(minLockScanRate))
	}
	v.facts.dbKnown = false
	if got := l.scanRate(); got != unknownLockScanRate {
		t.Errorf("unknown key count: %v keys/s", got)
	}
	if got := missingFlags("AKE"); got != "" {
		t.Errorf("missing flags of AKE: %q", got)
	}
	if got := missingFlags("Ex"); got != "Kg$e" {
		t.Errorf("missing flags of Ex: %q", got)
	}
	cfg.Unpaced = true
	if got := l.scanRate(); got > 0 {
		t.Errorf("pacing off: %v keys/s", got)
	}
}

// A pass that fell far behind its pace (its process stopped or starved of
// CPU) goes on at its rate from there: it never catches up at full speed,
// which would take the server for itself.
func TestPaceDoesNotCatchUp(t *testing.T) {
	fc := clockwork.NewFakeClock()
	e := &env{cfg: &Config{Pacer: fc}}
	ctx := context.Background()
	began := fc.Now().Add(-10 * time.Second) // 10,000 units due at 1,000/s, none done
	if err := e.pace(ctx, &began, 0, 1000); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.pace(ctx, &began, 100, 1000) }() // 100 ms of work, 50 ms behind
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fc.BlockUntilContext(bctx, 1); err != nil {
		t.Fatalf("100 units after a 10 s stall were sent at once: the pass caught up (%v)", err)
	}
	fc.Advance(maxPaceLag)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
