package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

type tally struct {
	mu  sync.Mutex
	out map[string][]Outcome
	n   atomic.Int64
}

func (t *tally) record(j Job, o Outcome) {
	t.mu.Lock()
	t.out[j.ID] = append(t.out[j.ID], o)
	t.mu.Unlock()
	t.n.Add(1)
}

func startWorkers(t *testing.T, srv *redistest.Server, reg *prometheus.Registry, n int, tl *tally) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		w, err := newWorker(srv.Client(t), reg, fmt.Sprintf("w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		w.OnOutcome = tl.record
		if err := w.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	return func() { cancel(); wg.Wait() }
}

// Jobs enqueued out of order and twice are each done once, the newest
// version's result is the one stored, and the metrics count exactly the
// duplicates skipped and the older results refused.
func TestJobsDoneOnceAndNewestResultWins(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var jobs []Job
	for e := range 5 {
		for v := int64(1); v <= 4; v++ {
			jobs = append(jobs, Job{ID: fmt.Sprintf("e%d-v%d", e, v), Entity: fmt.Sprintf("report:%d", e), Version: v})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	jobs = append(jobs, jobs[:5]...) // five re-enqueued jobs
	for _, j := range jobs {
		if err := Enqueue(ctx, rdb, "jobs", j); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	tl := &tally{out: map[string][]Outcome{}}
	stop := startWorkers(t, srv, reg, 3, tl)
	poll.Until(t, "every job to be handled", func() bool { return tl.n.Load() >= int64(len(jobs)) })
	stop()

	var done, outdated, dup int
	for id, outs := range tl.out {
		for _, o := range outs {
			switch o {
			case Done:
				done++
			case Outdated:
				outdated++
			case Duplicate:
				dup++
			default:
				t.Errorf("job %s: outcome %d", id, o)
			}
		}
		if n := len(outs); n != 1 && n != 2 {
			t.Errorf("job %s handled %d times", id, n)
		}
	}
	if done+outdated != 20 || dup != 5 {
		t.Fatalf("done %d + outdated %d, duplicates %d; want 20 jobs done once and 5 duplicates", done, outdated, dup)
	}
	cw := mustClient(t, rdb)
	for e := range 5 {
		_, v, err := cw.GetVersioned(ctx, fmt.Sprintf("result:{report:%d}", e))
		if err != nil || v != 4 {
			t.Errorf("report:%d stored version %d (%v), want 4", e, v, err)
		}
	}
	if got := metrictest.Sum(t, reg, signals.IdempotencyChecks.String(), "result", "duplicate"); got != 5 {
		t.Errorf("idempotency_checks{duplicate} = %v, want 5", got)
	}
	if got := metrictest.Sum(t, reg, signals.IdempotencyChecks.String(), "result", "first"); got != 20 {
		t.Errorf("idempotency_checks{first} = %v, want 20", got)
	}
	if got := metrictest.Sum(t, reg, signals.WriteSkew.String()); got != float64(outdated) {
		t.Errorf("write_skew_total = %v, want the %d older results refused", got, outdated)
	}
	if pending := rdb.XPending(ctx, "jobs", "workers").Val(); pending.Count != 0 {
		t.Errorf("%d messages left pending", pending.Count)
	}
}

// A message delivered to a worker that died before acknowledging it is
// reclaimed by another worker with XAUTOCLAIM and done.
func TestStuckMessageIsReclaimed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	w, err := newWorker(srv.Client(t), prometheus.NewRegistry(), "survivor")
	if err != nil {
		t.Fatal(err)
	}
	w.ReclaimIdle = 50 * time.Millisecond
	var outs []Outcome
	w.OnOutcome = func(_ Job, o Outcome) { outs = append(outs, o) }
	if err := w.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Enqueue(ctx, rdb, "jobs", Job{ID: "j1", Entity: "report:1", Version: 1}); err != nil {
		t.Fatal(err)
	}
	// The crashed worker: reads the message and never acknowledges it.
	got := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "crashed", Streams: []string{"jobs", ">"}, Count: 1}).Val()
	if len(got) != 1 || len(got[0].Messages) != 1 {
		t.Fatalf("crashed worker read %v", got)
	}
	poll.Until(t, "the stuck message to be reclaimed", func() bool {
		if err := w.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
		return len(outs) == 1
	})
	if outs[0] != Done {
		t.Fatalf("reclaimed job outcome %d, want Done", outs[0])
	}
	if p := rdb.XPending(ctx, "jobs", "workers").Val(); p.Count != 0 {
		t.Fatalf("%d messages still pending after the reclaim", p.Count)
	}
}

// Transient failures are retried with backoff; a job that keeps failing is
// left pending with its idempotency key forgotten, so a reclaim can retry it.
func TestRetriesAndGivingUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	w, err := newWorker(srv.Client(t), prometheus.NewRegistry(), "w")
	if err != nil {
		t.Fatal(err)
	}
	w.BaseBackoff, w.MaxBackoff = time.Millisecond, 5*time.Millisecond
	var calls atomic.Int64
	w.Compute = func(_ context.Context, job Job) ([]byte, error) {
		if n := calls.Add(1); job.ID == "flaky" && n < 3 || job.ID == "broken" {
			return nil, errors.New("source unavailable")
		}
		return []byte("ok"), nil
	}
	if out := w.Handle(ctx, Job{ID: "flaky", Entity: "report:1", Version: 1}); out != Done || calls.Load() != 3 {
		t.Fatalf("flaky job: outcome %d after %d calls, want Done after 3", out, calls.Load())
	}
	calls.Store(0)
	if out := w.Handle(ctx, Job{ID: "broken", Entity: "report:2", Version: 1}); out != Failed || calls.Load() != int64(w.MaxAttempts) {
		t.Fatalf("broken job: outcome %d after %d calls, want Failed after %d", out, calls.Load(), w.MaxAttempts)
	}
	if first, err := w.CW.FirstSeen(ctx, "idem:{broken}", time.Minute); err != nil || !first {
		t.Fatalf("a failed job's idempotency key was kept (first=%v, %v): a retry would skip it", first, err)
	}
	for n := 1; n <= 40; n++ {
		if d := fullJitter(time.Millisecond, 20*time.Millisecond, n); d < 0 || d >= 20*time.Millisecond {
			t.Fatalf("fullJitter(n=%d) = %v, outside [0, cap)", n, d)
		}
	}
}

// The queue's state is what `cachewatch exporter --queue jobs` reports.
func TestQueueVisibleThroughTheExporter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	w, err := newWorker(srv.Client(t), prometheus.NewRegistry(), "w")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if err := Enqueue(ctx, rdb, "jobs", Job{ID: fmt.Sprint(i), Entity: "report:1", Version: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer takes 3 and has not acknowledged them yet.
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "slow", Streams: []string{"jobs", ">"}, Count: 3})

	exp, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	exp.Sample(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(exp)
	checks := []struct {
		metric signals.ID
		want   float64
	}{
		{signals.QueueLength, 7},
		{signals.StreamGroupPending, 3},
		{signals.StreamGroupLag, 4},
	}
	for _, c := range checks {
		if got := metrictest.Sum(t, reg, c.metric.String(), "queue", "jobs"); got != c.want {
			t.Errorf("%s = %v, want %v", c.metric.String(), got, c.want)
		}
	}
}

func mustClient(t *testing.T, rdb *redis.Client) *instrument.Client {
	t.Helper()
	w, err := newWorker(rdb, prometheus.NewRegistry(), "reader")
	if err != nil {
		t.Fatal(err)
	}
	return w.CW
}

// The enqueue command's arguments make the job the worker handles.
func TestEnqueueArgs(t *testing.T) {
	job, err := jobArgs([]string{"enqueue", "j1", "report:7", "3"})
	if err != nil || job != (Job{ID: "j1", Entity: "report:7", Version: 3}) {
		t.Errorf("jobArgs = %+v, %v", job, err)
	}
	for _, bad := range [][]string{{"enqueue", "j1", "report:7"}, {"enqueue", "j1", "report:7", "three"}, {"push", "j1", "report:7", "3"}} {
		if _, err := jobArgs(bad); err == nil {
			t.Errorf("jobArgs(%q) accepted", bad)
		}
	}
}
