package exporter_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// lockWriter writes and deletes lock keys prefix0…prefix(keys-1) at random,
// one request at a time (a write, or a pipeline of them), and logs every
// write in the truth log.
type lockWriter struct {
	rdb    *redis.Client
	log    *truthLog
	rng    *rand.Rand
	prefix string
	keys   int
	// model is the writer's own view of its keys, so that it never changes
	// the expiry of a key about to expire (when that happens would decide
	// the outcome).
	model map[string]lockState
}

func newLockWriter(rdb *redis.Client, log *truthLog, prefix string, keys int, seed uint64) *lockWriter {
	return &lockWriter{rdb: rdb, log: log, rng: rand.New(rand.NewPCG(seed, 41)), prefix: prefix, keys: keys, model: map[string]lockState{}}
}

// op draws one write: mostly SETs (without TTL, with one of minutes, or
// with one under three seconds that runs out during the probe) and DELs,
// some PERSISTs and PEXPIREATs.
func (w *lockWriter) op(now time.Time) lockOp {
	key := w.prefix + strconv.Itoa(w.rng.IntN(w.keys))
	ms := now.UnixMilli()
	cur, ok := w.model[key]
	settled := !ok || cur.expireAt < 0 || cur.expireAt > ms+500 // not about to expire
	switch r := w.rng.IntN(100); {
	case r < 15:
		return lockOp{key: key, kind: 's', expireAt: -1}
	case r < 35:
		return lockOp{key: key, kind: 's', expireAt: ms + 300 + w.rng.Int64N(2700)}
	case r < 50:
		return lockOp{key: key, kind: 's', expireAt: ms + 60_000 + w.rng.Int64N(3_600_000)}
	case r < 60 && settled:
		return lockOp{key: key, kind: 'p', expireAt: -1}
	case r < 70 && settled:
		return lockOp{key: key, kind: 'e', expireAt: ms + 2_000 + w.rng.Int64N(60_000)}
	}
	return lockOp{key: key, kind: 'd'}
}

// send writes ops in one request (a pipeline when there are several) and
// logs them.
func (w *lockWriter) send(ctx context.Context, ops []lockOp) error {
	pipe := w.rdb.Pipeline()
	for _, op := range ops {
		switch op.kind {
		case 's':
			if op.expireAt < 0 {
				pipe.Set(ctx, op.key, "tok-"+strconv.Itoa(w.rng.Int()), 0)
			} else {
				pipe.Do(ctx, "SET", op.key, "tok-"+strconv.Itoa(w.rng.Int()), "PXAT", op.expireAt)
			}
		case 'd':
			pipe.Del(ctx, op.key)
		case 'p':
			pipe.Persist(ctx, op.key)
		case 'e':
			pipe.Do(ctx, "PEXPIREAT", op.key, op.expireAt)
		}
	}
	sent := time.Now()
	_, err := pipe.Exec(ctx)
	acked := time.Now()
	if err != nil && err != redis.Nil {
		return err
	}
	for i := range ops {
		ops[i].sent, ops[i].acked = sent, acked
		apply(w.model, ops[i])
	}
	w.log.add(ops...)
	return nil
}

// step sends one write, or now and then a pipeline of many.
func (w *lockWriter) step(ctx context.Context) error {
	n := 1
	if w.rng.IntN(20) == 0 {
		n = 10 + w.rng.IntN(40)
	}
	ops := make([]lockOp, n)
	now := time.Now()
	for i := range ops {
		ops[i] = w.op(now)
	}
	return w.send(ctx, ops)
}

// run writes until ctx is done, in bursts of back-to-back requests (a few
// to tens of milliseconds) between pauses, so that writes land at every
// point of the exporter's work, in flight and between its reads.
func (w *lockWriter) run(ctx context.Context) error { return w.runPaced(ctx, 20, 20) }

// runPaced writes in bursts of up to burstMs milliseconds (0: one request)
// between pauses of 1 to pauseMs milliseconds.
func (w *lockWriter) runPaced(ctx context.Context, burstMs, pauseMs int) error {
	for ctx.Err() == nil {
		for until := time.Now().Add(time.Duration(w.rng.IntN(burstMs+1)) * time.Millisecond); ; {
			if err := w.step(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if !time.Now().Before(until) {
				break
			}
		}
		time.Sleep(time.Duration(1+w.rng.IntN(pauseMs)) * time.Millisecond)
	}
	return nil
}

// seedLocks writes n lock keys prefixN (the first noTTL without expiry,
// the others expiring in an hour) and cache keys, logging the locks.
func seedLocks(t testing.TB, rdb *redis.Client, log *truthLog, prefix string, n, noTTL, cacheKeys int) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range cacheKeys {
		pipe.Set(ctx, "cache:item:"+strconv.Itoa(i), "v", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	w := &lockWriter{rdb: rdb, log: log, rng: rand.New(rand.NewPCG(1, 2)), model: map[string]lockState{}}
	at := time.Now().Add(time.Hour).UnixMilli()
	for start := 0; start < n; start += 1000 {
		ops := make([]lockOp, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			op := lockOp{key: prefix + strconv.Itoa(i), kind: 's', expireAt: at}
			if i < noTTL {
				op.expireAt = -1
			}
			ops = append(ops, op)
		}
		must(t, w.send(ctx, ops))
	}
}

// scrapedLocks reads the lock series of one node from gathered families:
// the figures keyed as truthAt keys them, and their data_timestamp_seconds.
// seen is empty when the scrape holds no lock figures (none shown yet, or
// the lock stage failing).
func scrapedLocks(fams []*dto.MetricFamily, node string) (seen lockFigures, at time.Time) {
	seen = lockFigures{}
	for _, f := range fams {
		name, isLock := strings.CutPrefix(f.GetName(), "cachewatch_exporter_")
		isLock = isLock && strings.HasPrefix(name, "locks_")
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["node"] != node {
				continue
			}
			switch {
			case f.GetName() == "cachewatch_exporter_data_timestamp_seconds" && labels["family"] == "locks":
				v := m.GetGauge().GetValue()
				at = time.Unix(0, int64(v*1e9))
			case isLock:
				series := name + `{key_group="` + labels["key_group"] + `"`
				if w, ok := labels["within"]; ok {
					series += `,within="` + w + `"`
				}
				seen[series+"}"] = m.GetGauge().GetValue()
			}
		}
	}
	return seen, at
}

// probeOptions make the passes of a small keyspace span several samples
// while locks are written: a low budget for the syncing pass and
// reconciling passes of a few seconds.
func probeOptions(addr string) exporter.Options {
	return exporter.Options{
		Target: exporter.Target{Addrs: []string{addr}, Mode: exporter.ModeStandalone},
		Sample: exporter.SampleOptions{Interval: 250 * time.Millisecond, MaxKeys: 2000},
		Locks:  exporter.LockOptions{ScanBudget: 0.02, Reconcile: 2 * time.Second},
	}
}

// The never-true probe. One goroutine writes and deletes locks (SET with
// and without TTL, locks running out, DEL, PERSIST, PEXPIREAT, pipelines of
// many) while the exporter syncs its index by a SCAN pass, follows the
// notifications and reconciles; the registry is scraped every few
// milliseconds, and every lock figure scraped is checked against the
// truth at its data_timestamp_seconds{family="locks"}, from the log of the
// writes. The server starts with notify-keyspace-events "" and the
// exporter's defaults turn it on. No figure may ever have been false.
func TestLockFiguresTrueAtTheirTimestamp(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	log := &truthLog{}
	seedLocks(t, rdb, log, "lock:order:", 300, 30, 20_000)
	e, reg := newExporter(t, probeOptions(srv.Addr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() { defer close(ran); _ = e.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	writer := newLockWriter(srv.Client(t), log, "lock:probe:", 200, 7)
	wrote := make(chan error, 1)
	go func() { wrote <- writer.run(ctx) }()

	var checked, stamps, reconciled int
	var last, passEnded time.Time
	for deadline := time.Now().Add(90 * time.Second); reconciled < 3 || checked < 200; {
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s: %d scrapes checked, %d reconciling passes", checked, reconciled)
		}
		select {
		case err := <-wrote:
			t.Fatalf("writer: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		fams, err := reg.Gather()
		must(t, err)
		seen, at := scrapedLocks(fams, srv.Addr)
		if len(seen) == 0 {
			continue
		}
		if ok, why := checkAt(log.snapshot(), seen, at, sampler.DefaultLongHeld); !ok {
			t.Fatalf("scrape %d shows figures never true at their time %s: %s", checked, at.Format(time.StampMicro), why)
		}
		checked++
		if at != last {
			last, stamps = at, stamps+1
		}
		if p := e.Snapshots()[0].Pass; p != nil && p.LocksNotified && !p.LockPassEnded.Equal(passEnded) {
			passEnded, reconciled = p.LockPassEnded, reconciled+1
		}
	}
	cancel()
	ops := len(log.snapshot())
	t.Logf("%d scrapes checked, %d distinct timestamps, %d passes ended while synced, %d writes", checked, stamps, reconciled, ops)
	if stamps < 10 {
		t.Errorf("the figures changed time only %d times: the probe saw too little", stamps)
	}
}

// Without notifications the lock figures are a SCAN pass's reading, shown
// once the pass has ended and its locks were read again, stamped then: a
// lock written during the pass where its cursor had passed may be missing
// until the next pass, so a figure is only known to lie between the locks
// there for the whole pass and those there at some moment of it — never
// outside, and never a pass in progress.
func TestScanLockFiguresWithinTheirPass(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	log := &truthLog{}
	seedLocks(t, rdb, log, "lock:order:", 300, 30, 20_000)
	opts := probeOptions(srv.Addr)
	opts.Locks.Notifications = exporter.NotifyOff
	e, _ := newExporter(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() { defer close(ran); _ = e.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	writer := newLockWriter(srv.Client(t), log, "lock:probe:", 200, 8)
	wrote := make(chan error, 1)
	go func() { wrote <- writer.run(ctx) }()

	var passes int
	var last time.Time
	var lastSeen lockFigures
	for deadline := time.Now().Add(90 * time.Second); passes < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s: %d passes checked", passes)
		}
		select {
		case err := <-wrote:
			t.Fatalf("writer: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		p := e.Snapshots()[0].Pass
		if p == nil || p.LocksAsOf.IsZero() {
			continue
		}
		seen := lockFigures{}
		for g, stats := range p.Groups {
			if stats.Locks > 0 {
				seen[`locks_held{key_group="`+g+`"}`] = float64(stats.Locks)
			}
		}
		if p.LocksAsOf.Equal(last) && maps.Equal(seen, lastSeen) {
			continue
		}
		if p.LocksAsOf.Equal(last) {
			t.Fatalf("the figures of %v changed without a new time: %v, then %v", last, lastSeen, seen)
		}
		last, lastSeen = p.LocksAsOf, seen
		if p.LocksNotified || p.LocksAsOf.Before(p.LockPassEnded) {
			t.Fatalf("figures of %v from a pass %v–%v, notified %v", p.LocksAsOf, p.LockPassStarted, p.LockPassEnded, p.LocksNotified)
		}
		if ok, why := boundsOver(log.snapshot(), p.LockPassStarted, p.LocksAsOf).matches(seen); !ok {
			t.Fatalf("pass %v–%v shown at %v: %s", p.LockPassStarted, p.LockPassEnded, p.LocksAsOf, why)
		}
		passes++
	}
}
