// Command worker is a job worker on a Redis Streams consumer group: every
// job carries an idempotency key, so a redelivered or re-enqueued job is
// done once; results are written by version, so a slow or retried job never
// writes an older result over a newer one; failures are retried with capped
// full-jitter backoff; and messages left pending by a crashed worker are
// reclaimed with XAUTOCLAIM. The queue's depth, lag, pending count and
// oldest age are visible through `cachewatch exporter --queue jobs`.
//
//	go run ./examples/worker --redis redis://localhost:6379 --consumer w1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/examples/internal/serve"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// Job is one message of the stream.
type Job struct {
	ID      string // idempotency key: the same ID is done once
	Entity  string // what the job recomputes, e.g. "report:7"
	Version int64  // version of the input it was computed from
}

// Enqueue adds job to stream.
func Enqueue(ctx context.Context, rdb redis.UniversalClient, stream string, job Job) error {
	return rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{
		"id": job.ID, "entity": job.Entity, "version": job.Version}}).Err()
}

// Outcome is what became of one delivered message.
type Outcome int

// Outcomes of Handle.
const (
	Done      Outcome = iota + 1 // result written as the newest version
	Duplicate                    // idempotency key seen before: skipped
	Outdated                     // a newer result was already stored: not written
	Failed                       // retries spent; left pending for a reclaim
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Duplicate:
		return "duplicate"
	case Outdated:
		return "outdated"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Worker consumes one stream as one consumer of a group.
type Worker struct {
	RDB      redis.UniversalClient
	CW       *instrument.Client
	Stream   string
	Group    string
	Consumer string
	// Compute does the job's work (the expensive part the cache protects).
	Compute func(ctx context.Context, job Job) ([]byte, error)
	// MaxAttempts bounds the tries of one job; retries wait a full-jitter
	// delay in [0, min(MaxBackoff, BaseBackoff·2^n)).
	MaxAttempts             int
	BaseBackoff, MaxBackoff time.Duration
	// ReclaimIdle is how long a message must sit pending with another
	// consumer before this one takes it over (its owner presumably died).
	ReclaimIdle time.Duration
	// OnOutcome, if set, sees every handled job (for the service's own
	// counters and for tests).
	OnOutcome func(Job, Outcome)
}

// Ensure creates the consumer group (and the stream) if missing.
func (w *Worker) Ensure(ctx context.Context) error {
	err := w.RDB.XGroupCreateMkStream(ctx, w.Stream, w.Group, "0").Err()
	if err != nil && !isBusyGroup(err) {
		return err
	}
	return nil
}

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}

// Run reads new messages and reclaims stuck ones until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := w.Reclaim(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("reclaim failed", "err", err)
		}
		streams, err := w.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{Group: w.Group, Consumer: w.Consumer,
			Streams: []string{w.Stream, ">"}, Count: 10, Block: 500 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			slog.Warn("read failed", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for _, s := range streams {
			for _, msg := range s.Messages {
				w.handleMessage(ctx, msg)
			}
		}
	}
	return ctx.Err()
}

// Reclaim takes over messages pending with any consumer for longer than
// ReclaimIdle (XAUTOCLAIM) and handles them.
func (w *Worker) Reclaim(ctx context.Context) error {
	start := "0-0"
	for {
		msgs, next, err := w.RDB.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: w.Stream, Group: w.Group,
			Consumer: w.Consumer, MinIdle: w.ReclaimIdle, Start: start, Count: 10}).Result()
		if err != nil {
			return err
		}
		for _, msg := range msgs {
			w.handleMessage(ctx, msg)
		}
		if next == "0-0" || len(msgs) == 0 {
			return nil
		}
		start = next
	}
}

func (w *Worker) handleMessage(ctx context.Context, msg redis.XMessage) {
	job, err := parseJob(msg)
	if err != nil { // a poison message: acknowledge it so it is not redelivered forever
		slog.Warn("dropping malformed job", "msg", msg.ID, "err", err)
		w.RDB.XAck(ctx, w.Stream, w.Group, msg.ID)
		return
	}
	out := w.Handle(ctx, job)
	if w.OnOutcome != nil {
		w.OnOutcome(job, out)
	}
	if out != Failed {
		w.RDB.XAck(ctx, w.Stream, w.Group, msg.ID)
	}
}

// Handle does one job at most once and writes its result by version.
func (w *Worker) Handle(ctx context.Context, job Job) Outcome {
	first, err := w.CW.FirstSeen(ctx, "idem:{"+job.ID+"}", 24*time.Hour)
	if err != nil {
		return Failed
	}
	if !first {
		return Duplicate
	}
	for attempt := 0; attempt < w.MaxAttempts; attempt++ {
		if attempt > 0 && !sleep(ctx, fullJitter(w.BaseBackoff, w.MaxBackoff, attempt)) {
			break
		}
		result, err := w.Compute(ctx, job)
		if err != nil {
			continue
		}
		res, err := w.CW.SetVersioned(ctx, "result:{"+job.Entity+"}", result, job.Version, 7*24*time.Hour)
		if err != nil {
			continue
		}
		if res == instrument.NewerVersion {
			return Done
		}
		return Outdated
	}
	// Let a later delivery (a reclaim) try again: forget the idempotency key.
	_, _ = w.CW.Invalidate(context.WithoutCancel(ctx), "idem:{"+job.ID+"}")
	return Failed
}

// fullJitter is the wait before retry n (n ≥ 1): uniform in
// [0, min(max, base·2^(n-1))), so retrying workers spread apart instead of
// retrying in lockstep.
func fullJitter(base, max time.Duration, n int) time.Duration {
	ceiling := base << min(n-1, 30)
	if ceiling <= 0 || ceiling > max {
		ceiling = max
	}
	return rand.N(ceiling)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func parseJob(msg redis.XMessage) (Job, error) {
	id, _ := msg.Values["id"].(string)
	entity, _ := msg.Values["entity"].(string)
	v, _ := msg.Values["version"].(string)
	version, err := strconv.ParseInt(v, 10, 64)
	if id == "" || entity == "" || err != nil {
		return Job{}, fmt.Errorf("job %s: want id, entity and an integer version", msg.ID)
	}
	return Job{ID: id, Entity: entity, Version: version}, nil
}

// usage is the example's command line.
const usage = `usage:
  worker [--redis URL] [--consumer NAME] [--listen ADDR]   work the jobs stream
  worker [--redis URL] enqueue ID ENTITY VERSION           add one job to it`

func main() {
	url := flag.String("redis", "redis://127.0.0.1:6379", serve.URLHelp)
	consumer := flag.String("consumer", "worker-1", "consumer name in the group")
	listen := flag.String("listen", "127.0.0.1:8082", "address of /metrics")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, usage); flag.PrintDefaults() }
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if flag.NArg() > 0 {
		job, err := jobArgs(flag.Args())
		if err != nil {
			serve.Exit("worker", 2, fmt.Errorf("%w\n%s", err, usage))
		}
		rdb := serve.Redis("worker", *url)
		if err := Enqueue(ctx, rdb, "jobs", job); err != nil {
			serve.Exit("worker", 1, err)
		}
		fmt.Printf("enqueued job %s: %s at version %d\n", job.ID, job.Entity, job.Version)
		return
	}
	reg := prometheus.NewRegistry()
	w, err := newWorker(serve.Redis("worker", *url), reg, *consumer)
	if err != nil {
		serve.Exit("worker", 1, err)
	}
	w.OnOutcome = func(job Job, o Outcome) {
		slog.Info("job handled", "id", job.ID, "entity", job.Entity, "version", job.Version, "outcome", o)
	}
	go serve.HTTP("worker", *listen, reg, nil)
	if err := w.Ensure(ctx); err != nil {
		serve.Exit("worker", 1, err)
	}
	_ = w.Run(ctx)
}

// jobArgs reads "enqueue ID ENTITY VERSION".
func jobArgs(args []string) (Job, error) {
	if len(args) != 4 || args[0] != "enqueue" {
		return Job{}, fmt.Errorf("unexpected arguments %q", args)
	}
	v, err := strconv.ParseInt(args[3], 10, 64)
	if err != nil {
		return Job{}, fmt.Errorf("VERSION %q: want an integer", args[3])
	}
	return Job{ID: args[1], Entity: args[2], Version: v}, nil
}

// newWorker wires the hook and the instrumented client with the example's
// defaults.
func newWorker(rdb *redis.Client, reg prometheus.Registerer, consumer string) (*Worker, error) {
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: consumer})
	if err != nil {
		return nil, err
	}
	rdb.AddHook(h)
	cw, err := instrument.New(rdb, instrument.Options{Registerer: reg, Name: consumer})
	if err != nil {
		return nil, err
	}
	return &Worker{RDB: rdb, CW: cw, Stream: "jobs", Group: "workers", Consumer: consumer,
		Compute: func(_ context.Context, job Job) ([]byte, error) {
			return []byte(fmt.Sprintf("%s computed from v%d", job.Entity, job.Version)), nil
		},
		MaxAttempts: 5, BaseBackoff: 10 * time.Millisecond, MaxBackoff: time.Second, ReclaimIdle: 30 * time.Second}, nil
}
