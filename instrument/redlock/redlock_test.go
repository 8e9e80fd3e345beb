package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/instrument/redlock"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

var retryLong = instrument.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond, Retries: 100000}

// nodes starts three independent redis-servers.
func nodes(t *testing.T) []*redistest.Server {
	return []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
}

// serviceProcess is what one service process would hold: its own client to
// every node and a Redlock over them.
type serviceProcess struct {
	rl      *redlock.Redlock
	clients []*redis.Client
	setNX   *locktest.SetNXCounter // counts its first client's SET NX
}

// process builds one service process over servers.
func process(t *testing.T, servers []*redistest.Server, reg prometheus.Registerer, b instrument.Backoff) serviceProcess {
	t.Helper()
	counter := &locktest.SetNXCounter{}
	var clients []*redis.Client
	var pools []redsyncredis.Pool
	for i, s := range servers {
		rdb := s.Client(t)
		if i == 0 {
			rdb.AddHook(counter)
		}
		clients = append(clients, rdb)
		pools = append(pools, goredis.NewPool(rdb))
	}
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{Registerer: reg, Backoff: b})
	if err != nil {
		t.Fatal(err)
	}
	return serviceProcess{rl: rl, clients: clients, setNX: counter}
}

func TestRedlockMutualExclusionOverThreeNodes(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	const procs, perProc, rounds = 3, 4, 5
	var section locktest.Section
	var sent []*locktest.SetNXCounter
	var wg sync.WaitGroup
	for range procs {
		p := process(t, servers, reg, retryLong)
		sent = append(sent, p.setNX)
		for range perProc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if !holdOnce(t, p.rl.NewMutex("lock:{report:1}"), &section) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if section.Overlaps() != 0 {
		t.Fatalf("%d entries found another holder inside", section.Overlaps())
	}
	const locks = procs * perProc * rounds
	if section.Entered() != locks {
		t.Fatalf("entered %d, want %d", section.Entered(), locks)
	}
	var attempts int64
	for _, c := range sent {
		attempts += c.N()
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total"); got != float64(attempts) {
		t.Fatalf("lock_attempts_total = %v, SET NX sent to node 0 = %d (one per attempt)", got, attempts)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "acquired"); got != locks {
		t.Fatalf("acquired = %v, want %d", got, locks)
	}
	if got, retries := metrictest.Sum(t, reg, "cachewatch_retries_total"), metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "attempt", "retry"); got != retries || got != float64(attempts-locks) {
		t.Fatalf("retries_total = %v, retry attempts = %v, want %d", got, retries, attempts-locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_hold_duration_seconds"); got != locks {
		t.Fatalf("holds observed = %v, want %d", got, locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "acquired"); got != locks {
		t.Fatalf("acquire durations = %v, want %d", got, locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 0 {
		t.Fatalf("lost = %v, want 0", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// holdOnce locks m, holds section briefly and unlocks m; false when it
// could not lock.
func holdOnce(t *testing.T, m *redlock.Mutex, section *locktest.Section) bool {
	if err := m.Lock(context.Background()); err != nil {
		t.Error(err)
		return false
	}
	section.Hold(200 * time.Microsecond)
	if err := m.Unlock(context.Background()); err != nil {
		t.Error(err)
	}
	return true
}

func TestRedlockQuorumAndNodeFailures(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	rl := process(t, servers, reg, instrument.Backoff{Retries: -1}).rl
	ctx := context.Background()

	servers[2].Kill() // 2 of 3 still form a quorum
	m := rl.NewMutex("lock:{quorum}")
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock with one node down = %v", err)
	}
	busy := rl.NewMutex("lock:{quorum}")
	if err := busy.Lock(ctx); !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("second Lock = %v, want ErrLockBusy", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one node down = %v", err)
	}

	servers[1].Kill() // no quorum left
	lone := rl.NewMutex("lock:{quorum}")
	err := lone.Lock(ctx)
	if !errors.Is(err, instrument.ErrRedis) || errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("Lock with two nodes down = %v, want ErrRedis", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "error"); got != 1 {
		t.Fatalf("attempts{error} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "busy"); got != 1 {
		t.Fatalf("attempts{busy} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up"); got != 1 {
		t.Fatalf("acquire{gave_up} = %v, want 1", got)
	}
}

func TestRedlockExpiryAndExtend(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	p := process(t, servers, reg, instrument.Backoff{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond, Retries: 100000})
	ctx := context.Background()

	// Expiry mid-work: the second worker gets in; the first's unlock finds
	// no quorum of its value. redsync gives each node expiry x timeout
	// factor to answer (7.5ms for a 150ms lock at its default 0.05, which a
	// loaded machine misses on two nodes: "context deadline exceeded"), so
	// the short lock gets a 1s expiry and half of it per node.
	a := p.rl.NewMutex("lock:{exp}", redsync.WithExpiry(time.Second), redsync.WithTimeoutFactor(0.5))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	b := p.rl.NewMutex("lock:{exp}", redsync.WithExpiry(time.Minute))
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("stale unlock = %v, want ErrNotOwner", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "expired"); got != 1 {
		t.Fatalf("lost{expired} = %v, want 1", got)
	}
	// b holds a quorum (a node where a's key had not yet expired when b
	// tried it may hold nothing), and the stale unlock removed b from none.
	checkQuorum(t, p.clients, "lock:{exp}", b.Value())
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Extend renews; a lock deleted behind the holder's back is lost.
	c := p.rl.NewMutex("lock:{ext}", redsync.WithExpiry(time.Minute))
	if err := c.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rdb := range p.clients {
		rdb.Del(ctx, "lock:{ext}")
	}
	if err := c.Extend(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("Extend of a deleted lock = %v, want ErrNotOwner", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "renewed"); got != 1 {
		t.Fatalf("renewals{renewed} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "lost"); got != 1 {
		t.Fatalf("renewals{lost} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "not_owner"); got != 1 {
		t.Fatalf("lost{not_owner} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 2 {
		t.Fatalf("lost total = %v, want 2", got)
	}
}

// checkQuorum checks that a quorum of the nodes hold value at key, and that
// the others hold nothing there.
func checkQuorum(t *testing.T, clients []*redis.Client, key, value string) {
	t.Helper()
	held := 0
	for i, rdb := range clients {
		switch v := rdb.Get(context.Background(), key).Val(); v {
		case value:
			held++
		case "":
		default:
			t.Fatalf("node %d holds %q, want the owner's value or nothing", i, v)
		}
	}
	if held < len(clients)/2+1 {
		t.Fatalf("the owner holds %d of %d nodes, want a quorum", held, len(clients))
	}
}

func TestRedlockContextDeadline(t *testing.T) {
	servers := nodes(t)
	rl := process(t, servers, prometheus.NewRegistry(), instrument.Backoff{Base: 10 * time.Millisecond, Retries: 100000}).rl
	held := rl.NewMutex("lock:{ctx}")
	if err := held.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := rl.NewMutex("lock:{ctx}").Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("Lock past the deadline = %v, want context.DeadlineExceeded", err)
	}
}

// A Redlock configured to try once (Backoff.Retries: -1) labels its
// attempts and acquisitions mode="try_once"; one that retries, "wait".
func TestRedlockModeTellsTryOnceFromWaiting(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	once := process(t, servers, reg, instrument.Backoff{Retries: -1}).rl
	waiting := process(t, servers, reg, instrument.Backoff{Base: time.Millisecond, Retries: 1}).rl
	ctx := context.Background()
	held := once.NewMutex("lock:{mode}")
	if err := held.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := once.NewMutex("lock:{mode}").Lock(ctx); !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("try-once Lock of a held mutex = %v, want ErrLockBusy", err)
	}
	if err := waiting.NewMutex("lock:{mode}").Lock(ctx); !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("waiting Lock of a held mutex = %v, want ErrLockBusy after its retry", err)
	}
	for labels, want := range map[[4]string]float64{
		{"cachewatch_lock_attempts_total", "try_once", "result", "acquired"}:            1,
		{"cachewatch_lock_attempts_total", "try_once", "result", "busy"}:                1,
		{"cachewatch_lock_attempts_total", "wait", "result", "busy"}:                    2,
		{"cachewatch_lock_attempts_total", "wait", "result", "acquired"}:                0,
		{"cachewatch_lock_acquire_duration_seconds", "try_once", "outcome", "acquired"}: 1,
		{"cachewatch_lock_acquire_duration_seconds", "try_once", "outcome", "gave_up"}:  1,
		{"cachewatch_lock_acquire_duration_seconds", "wait", "outcome", "gave_up"}:      1,
	} {
		if got := metrictest.Sum(t, reg, labels[0], "mode", labels[1], labels[2], labels[3]); got != want {
			t.Errorf("%s{mode=%q, %s=%q} = %v, want %v", labels[0], labels[1], labels[2], labels[3], got, want)
		}
	}
}

// A caller whose own deadline ends while its attempt is in flight on the
// nodes gave up: the acquisition counts as gave_up, the attempt (no node
// answered) is not counted, and nothing is a Redis error.
func TestRedlockCallerDeadlineDuringAttemptGivesUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := process(t, nodes(t), reg, retryLong)
	hold := &locktest.HoldAttempts{Entered: make(chan struct{}, len(p.clients))}
	for _, rdb := range p.clients {
		rdb.AddHook(hold)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := p.rl.NewMutex("lock:{cut}").Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, instrument.ErrRedis) || errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("Lock cut off by its deadline = %v, want only context.DeadlineExceeded", err)
	}
	if len(hold.Entered) == 0 {
		t.Fatal("no attempt was held: the test did not cut one off")
	}
	locktest.CheckCutOff(t, reg, 1)
}

// With Renew, a held mutex outlives many times its expiry, each extension
// counted; when its keys are deleted behind the holder's back the next
// extension finds it lost: counted once, and the mutex's Context is
// cancelled with ErrLockLost. Unlock then reports ErrNotOwner without
// counting the loss again, and a renewed mutex that is unlocked normally
// has its Context cancelled as released, not lost.
func TestRedlockRenew(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	clients := process(t, servers, reg, retryLong).clients
	var pools []redsyncredis.Pool
	for _, rdb := range clients {
		pools = append(pools, goredis.NewPool(rdb))
	}
	rl := renewingRedlock(t, reg, pools)
	ctx := context.Background()
	renewed := func() float64 {
		return metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "renewed")
	}

	m := rl.NewMutex("lock:{renew}", redsync.WithExpiry(renewExpiry))
	if m.Context().Err() == nil {
		t.Fatal("Context of a mutex never locked is not done")
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	value := m.Value()
	poll.Until(t, "four renewals (more than the expiry, four times over)", func() bool { return renewed() >= 4 })
	if m.Context().Err() != nil {
		t.Fatalf("Context done while renewed: %v", context.Cause(m.Context()))
	}
	held := 0
	for _, rdb := range clients {
		if rdb.Get(ctx, "lock:{renew}").Val() == value {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("renewed lock held on %d of 3 nodes, want a quorum", held)
	}

	for _, rdb := range clients {
		rdb.Del(ctx, "lock:{renew}")
	}
	poll.Until(t, "the heartbeat to find the lock gone", func() bool { return m.Context().Err() != nil })
	if cause := context.Cause(m.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("Context cause %v, want ErrLockLost", cause)
	}
	if err := m.Unlock(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("Unlock of a lost lock = %v, want ErrNotOwner", err)
	}
	if lost := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); lost != 1 {
		t.Fatalf("locks lost = %v, want 1 (counted once)", lost)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "lost"); got != 1 {
		t.Fatalf("renewals{lost} = %v, want 1", got)
	}

	checkRenewedUnlockNotLost(t, rl, reg)
	checkStoppedNodesEndTheHold(t, servers, reg)
}

// renewExpiry is the renewing mutexes' expiry: renewed every ~330ms, far
// from a loaded machine's scheduling stalls.
const renewExpiry = time.Second

// renewingRedlock returns a Redlock over pools whose mutexes renew their
// hold, counted in reg.
func renewingRedlock(t *testing.T, reg prometheus.Registerer, pools []redsyncredis.Pool) *redlock.Redlock {
	t.Helper()
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{Registerer: reg, Backoff: retryLong, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// checkRenewedUnlockNotLost: a renewed mutex unlocked normally has its
// Context done as released, not lost, and no loss counted (one was
// counted before).
func checkRenewedUnlockNotLost(t *testing.T, rl *redlock.Redlock, reg prometheus.Gatherer) {
	ctx := context.Background()
	n := rl.NewMutex("lock:{renew2}", redsync.WithExpiry(renewExpiry))
	if err := n.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(n.Context()); n.Context().Err() == nil || errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("after Unlock: Context err %v cause %v, want done and not lost", n.Context().Err(), cause)
	}
	if lost := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); lost != 1 {
		t.Fatalf("locks lost = %v after a normal unlock, want still 1", lost)
	}
}

// checkStoppedNodesEndTheHold: every node stopped (SIGSTOP), reached
// through clients without a read timeout: the extension waits for as long
// as the nodes are stopped, yet the hold ends when its validity does, as a
// failed renewal (one loss was counted before).
func checkStoppedNodesEndTheHold(t *testing.T, servers []*redistest.Server, reg *prometheus.Registry) {
	ctx := context.Background()
	var stalling []redsyncredis.Pool
	for _, s := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: -1, WriteTimeout: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		stalling = append(stalling, goredis.NewPool(rdb))
	}
	rls := renewingRedlock(t, reg, stalling)
	f := rls.NewMutex("lock:{renew3}", redsync.WithExpiry(renewExpiry))
	if err := f.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Pause()
	}
	poll.Until(t, "the lock to be given up after failed renewals", func() bool { return f.Context().Err() != nil })
	for _, s := range servers {
		s.Resume()
	}
	if cause := context.Cause(f.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("Context cause %v, want ErrLockLost", cause)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "renew_failed"); got != 1 {
		t.Fatalf("lost{renew_failed} = %v, want 1", got)
	}
	_ = f.Unlock(ctx)
	if lost := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); lost != 2 {
		t.Fatalf("locks lost = %v, want 2 (the unlock of a lost lock counts nothing more)", lost)
	}
}
