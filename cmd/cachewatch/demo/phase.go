package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/keygroup"
)

// Every key the demo writes starts with keyPrefix, so that it can clean up
// after itself on a Redis that holds other data.
const keyPrefix = "cwdemo:"

// LockPattern matches every lock the demo takes: the job's and, in the
// unprotected phase, the hand-written lock of each hot key.
const LockPattern = keyPrefix + "lock:*"

// jobLockKey is the lock of the periodic job every instance tries to run;
// jobLockTTL its lease, in both phases (renewed only under cachewatch).
const (
	jobLockKey = keyPrefix + "lock:report"
	jobLockTTL = 300 * time.Millisecond
)

// Pacing of the simulated callers.
const (
	thinkTime    = 60 * time.Millisecond // between one caller's requests, on average
	jobEvery     = 2 * time.Second       // between one instance's tries of the periodic job, on average
	writeEvery   = 40 * time.Millisecond
	writeDelay   = 60 * time.Millisecond // an update's processing time, up to
	opTimeout    = 5 * time.Second
	sampleEvery  = 500 * time.Millisecond
	productGroup = keyPrefix + "product:*"

	// A key group with burstThreshold misses within burstWindow counts one
	// miss burst, for the hooks and the cachewatch client alike.
	burstWindow    = time.Second
	burstThreshold = 10
)

// jobWork is how long one run of the periodic job works: 100–600 ms, often
// longer than the 300 ms lock lease.
func jobWork() time.Duration { return 100*time.Millisecond + rand.N(500*time.Millisecond) }

func productKey(i int) string { return keyPrefix + "product:{" + strconv.Itoa(i) + "}" }
func priceKey(i int) string   { return keyPrefix + "price:{" + strconv.Itoa(i) + "}" }

// lockKeyOf is the hand-written lock guarding key's refresh.
func lockKeyOf(key string) string { return keyPrefix + "lock:" + key[len(keyPrefix):] }

// service is one simulated service instance of a phase.
type service interface {
	read(ctx context.Context, key string) (Product, error)
	job(ctx context.Context)
	write(ctx context.Context, key string, version int64)
	close()
}

// env is what every instance of a run shares: the Redis to reach, the
// registry, the simulated database and the current phase's counters.
type env struct {
	newClient func() *redis.Client
	reg       *prometheus.Registry
	groups    *keygroup.Classifier
	quiet     *slog.Logger
	freshTTL  time.Duration
	// redisTimeout bounds the cachewatch client's round trips.
	redisTimeout time.Duration
	// retryHorizon is the hooks' RetryHorizon (Options.retryHorizon).
	retryHorizon time.Duration
	holdPhase    func(phase string) // Options.holdPhase

	db       *database
	versions *versions
	current  atomic.Pointer[truth]
	seq      atomic.Int64 // version of the next price update
}

func (e *env) truth() *truth { return e.current.Load() }

// phaseSpec says how to run one phase.
type phaseSpec struct {
	name      string
	newInst   func(e *env, i int) (service, error)
	instances int
	callers   int
	keys      int
	duration  time.Duration
}

// runPhase starts the fleet, lets it run for spec.duration and stops it,
// waiting for every operation in flight, so that the counters and the
// metrics describe the same finished work. tick is called every
// sampleEvery with the elapsed time.
func runPhase(ctx context.Context, e *env, spec phaseSpec, tick func(time.Duration)) error {
	fleet := make([]service, 0, spec.instances)
	defer func() {
		for _, s := range fleet {
			s.close()
		}
	}()
	for i := 1; i <= spec.instances; i++ {
		s, err := spec.newInst(e, i)
		if err != nil {
			return fmt.Errorf("%s instance %d: %w", spec.name, i, err)
		}
		fleet = append(fleet, s)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range fleet {
		for range spec.callers {
			wg.Go(func() { callerLoop(stop, e, s, spec.keys) })
		}
		wg.Go(func() { every(stop, jobEvery, func(ctx context.Context) { s.job(ctx) }) })
		wg.Go(func() { writerLoop(stop, e, s, spec.keys) })
	}

	start := time.Now()
	ticker := time.NewTicker(sampleEvery)
	timer := time.NewTimer(spec.duration)
	defer ticker.Stop()
	defer timer.Stop()
	var (
		err  error
		held <-chan struct{} // closed once holdPhase has returned
	)
loop:
	for {
		select {
		case <-ticker.C:
			tick(time.Since(start))
		case <-timer.C:
			if e.holdPhase == nil {
				break loop
			}
			done := make(chan struct{})
			go func() { defer close(done); e.holdPhase(spec.name) }()
			held = done
		case <-held:
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	close(stop)
	wg.Wait()
	tick(time.Since(start))
	return err
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// pause waits d or until stop; it reports whether to go on.
func pause(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// opContext bounds one operation. It is not tied to the phase's end: an
// operation in flight finishes, so that the demo's count and the metrics
// agree.
func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func callerLoop(stop <-chan struct{}, e *env, s service, keys int) {
	for !stopped(stop) {
		key := productKey(1 + rand.IntN(keys))
		ctx, cancel := opContext()
		began := time.Now()
		_, err := s.read(ctx, key)
		cancel()
		if err == nil {
			t := e.truth()
			t.requests.Add(1)
			t.latency.record(began, time.Since(began))
		}
		if !pause(stop, thinkTime/2+rand.N(thinkTime)) {
			return
		}
	}
}

func writerLoop(stop <-chan struct{}, e *env, s service, keys int) {
	for pause(stop, writeEvery/2+rand.N(writeEvery)) {
		version := e.seq.Add(1)
		key := priceKey(1 + rand.IntN(keys))
		time.Sleep(rand.N(writeDelay)) // processing: updates finish out of order
		ctx, cancel := opContext()
		s.write(ctx, key, version)
		cancel()
	}
}

func every(stop <-chan struct{}, d time.Duration, f func(ctx context.Context)) {
	for pause(stop, d/2+rand.N(d)) {
		ctx, cancel := opContext()
		f(ctx)
		cancel()
	}
}
