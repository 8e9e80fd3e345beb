package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestSetVersionedOrderedOutcomes(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, srv.Client(t), reg, nil)
	ctx := context.Background()
	// A slow job (1), a retry (3 again), an out-of-order completion (2, 4).
	steps := []struct {
		version int64
		want    instrument.WriteResult
	}{
		{3, instrument.NewerVersion}, {1, instrument.OlderVersion}, {3, instrument.DuplicateVersion},
		{5, instrument.NewerVersion}, {2, instrument.OlderVersion}, {5, instrument.DuplicateVersion},
		{4, instrument.OlderVersion},
		// Versions beyond 2^53 still compare exactly.
		{1 << 53, instrument.NewerVersion}, {1<<53 + 1, instrument.NewerVersion}, {1 << 53, instrument.OlderVersion},
		{math.MaxInt64, instrument.NewerVersion}, {math.MaxInt64 - 1, instrument.OlderVersion},
	}
	for _, s := range steps {
		got, err := c.SetVersioned(ctx, "result:{job:9}", []byte("v"+strconv.FormatInt(s.version, 10)), s.version, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != s.want {
			t.Fatalf("write of version %d = %v, want %v", s.version, got, s.want)
		}
	}
	value, version, err := c.GetVersioned(ctx, "result:{job:9}")
	if err != nil || version != math.MaxInt64 || string(value) != "v"+strconv.FormatInt(math.MaxInt64, 10) {
		t.Fatalf("stored = %q v%d err=%v, want the newest", value, version, err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_write_skew_total"); got != 5 {
		t.Fatalf("write_skew_total = %v, want 5", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_duplicate_version_writes_total"); got != 2 {
		t.Fatalf("duplicate_version_writes_total = %v, want 2", got)
	}
	if _, err := c.SetVersioned(ctx, "result:{job:9}", nil, -1, 0); err == nil {
		t.Fatal("negative version accepted")
	}
	if value, version, err := c.GetVersioned(ctx, "result:{missing}"); !errors.Is(err, instrument.ErrNotFound) || value != nil || version != 0 {
		t.Fatalf("missing key = %q v%d err=%v, want ErrNotFound", value, version, err)
	}
}

// Concurrent, shuffled and retried completions of versions 1..n: the newest
// always wins and the counters equal the outcomes returned.
func TestSetVersionedConcurrentRetries(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	const n, workers = 60, 6
	var writes []int64
	for v := int64(1); v <= n; v++ {
		writes = append(writes, v, v) // every job is retried once
	}
	rand.Shuffle(len(writes), func(i, j int) { writes[i], writes[j] = writes[j], writes[i] })
	var next atomic.Int64
	var skew, dup, written atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		c := lockClient(t, srv.Client(t), reg, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(writes)); i = next.Add(1) - 1 {
				v := writes[i]
				r, err := c.SetVersioned(context.Background(), "profile:{42}", []byte(fmt.Sprint(v)), v, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				map[instrument.WriteResult]*atomic.Int64{instrument.NewerVersion: &written,
					instrument.OlderVersion: &skew, instrument.DuplicateVersion: &dup}[r].Add(1)
			}
		}()
	}
	wg.Wait()
	c := lockClient(t, srv.Client(t), reg, nil)
	value, version, err := c.GetVersioned(context.Background(), "profile:{42}")
	if err != nil || version != n || string(value) != strconv.Itoa(n) {
		t.Fatalf("stored version %d (%q, %v), want %d", version, value, err, n)
	}
	if written.Load()+skew.Load()+dup.Load() != 2*n {
		t.Fatalf("outcomes %d+%d+%d, want %d", written.Load(), skew.Load(), dup.Load(), 2*n)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_write_skew_total"); got != float64(skew.Load()) {
		t.Fatalf("write_skew_total = %v, older outcomes = %d", got, skew.Load())
	}
	if got := metrictest.Sum(t, reg, "cachewatch_duplicate_version_writes_total"); got != float64(dup.Load()) {
		t.Fatalf("duplicate_version_writes_total = %v, duplicate outcomes = %d", got, dup.Load())
	}
}

func TestFirstSeenOncePerKey(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	var firsts atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := c.FirstSeen(context.Background(), "idem:payment:77", time.Minute)
			if err != nil {
				t.Error(err)
			}
			if first {
				firsts.Add(1)
			}
		}()
	}
	wg.Wait()
	if firsts.Load() != 1 {
		t.Fatalf("%d callers saw the key first, want 1", firsts.Load())
	}
	if got := metrictest.Sum(t, reg, "cachewatch_idempotency_checks_total", "result", "first"); got != 1 {
		t.Fatalf("idempotency{first} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_idempotency_checks_total", "result", "duplicate"); got != 19 {
		t.Fatalf("idempotency{duplicate} = %v, want 19", got)
	}
	if ttl := rdb.PTTL(context.Background(), "idem:payment:77").Val(); ttl <= 0 {
		t.Fatalf("idempotency key PTTL = %v, want a TTL", ttl)
	}
	if _, err := c.FirstSeen(context.Background(), "idem:x", 0); err == nil {
		t.Fatal("an idempotency key without TTL was accepted")
	}
	srv.Kill()
	if _, err := c.FirstSeen(context.Background(), "idem:y", time.Minute); !errors.Is(err, instrument.ErrRedis) {
		t.Fatalf("FirstSeen on a killed Redis = %v, want ErrRedis", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_idempotency_checks_total", "result", "error"); got != 1 {
		t.Fatalf("idempotency{error} = %v, want 1", got)
	}
}

func TestSlideTTLOnlyPastThreshold(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	ctx := context.Background()
	const ttl = 10 * time.Second
	rdb.Set(ctx, "session:abc", "x", ttl)
	rdb.Set(ctx, "session:forever", "x", 0)

	check := func(key string, want instrument.SlideResult) {
		t.Helper()
		got, err := c.SlideTTL(ctx, key, ttl, 0.5)
		if err != nil || got != want {
			t.Fatalf("SlideTTL(%q) = %v, %v; want %v", key, got, err, want)
		}
	}
	check("session:abc", instrument.NotYetDue) // 10 s left of 10: not touched
	if left := rdb.PTTL(ctx, "session:abc").Val(); left > ttl {
		t.Fatalf("PTTL grew to %v", left)
	}
	rdb.PExpire(ctx, "session:abc", 4*time.Second) // 60% of its life passed
	check("session:abc", instrument.Slid)
	if left := rdb.PTTL(ctx, "session:abc").Val(); left <= 5*time.Second {
		t.Fatalf("PTTL after sliding = %v, want reset near %v", left, ttl)
	}
	check("session:forever", instrument.NoExpiry)
	if left := rdb.PTTL(ctx, "session:forever").Val(); left != -1 {
		t.Fatalf("a key without expiry got PTTL %v", left)
	}
	check("session:none", instrument.KeyMissing)
	if n := rdb.Exists(ctx, "session:none").Val(); n != 0 {
		t.Fatal("sliding created a missing key")
	}
	if _, err := c.SlideTTL(ctx, "session:abc", ttl, 1.5); err == nil {
		t.Fatal("threshold 1.5 accepted")
	}
}

func TestInvalidateUnlinksByKeyAndPattern(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	ctx := context.Background()
	fill(t, rdb, "sess:", 1234)
	fill(t, rdb, "keep:", 10)

	n, err := c.Invalidate(ctx, "keep:0", "keep:1", "keep:absent")
	if err != nil || n != 2 {
		t.Fatalf("Invalidate = %d, %v; want 2", n, err)
	}
	n, err = c.InvalidateMatch(ctx, "sess:*")
	if err != nil || n != 1234 {
		t.Fatalf("InvalidateMatch = %d, %v; want 1234", n, err)
	}
	if size := rdb.DBSize(ctx).Val(); size != 8 {
		t.Fatalf("%d keys left, want the 8 other keep: keys", size)
	}
	stats := rdb.Info(ctx, "commandstats").Val()
	if strings.Contains(stats, "cmdstat_keys:") || strings.Contains(stats, "cmdstat_del:") {
		t.Fatalf("invalidation used KEYS or DEL:\n%s", stats)
	}
	if !strings.Contains(stats, "cmdstat_unlink:") || !strings.Contains(stats, "cmdstat_scan:") {
		t.Fatalf("invalidation did not SCAN and UNLINK:\n%s", stats)
	}
	if _, err := c.InvalidateMatch(ctx, ""); err == nil {
		t.Fatal("empty pattern accepted")
	}
	// The metric counts the keys removed (not those asked for), per key
	// group of the removed key and per way of naming them.
	const name = "cachewatch_cache_invalidated_keys_total"
	byKeys := metrictest.Sum(t, reg, name, "key_group", "keep:*", "by", "keys")
	byPattern := metrictest.Sum(t, reg, name, "key_group", "sess:*", "by", "pattern")
	if byKeys != 2 || byPattern != 1234 || metrictest.Sum(t, reg, name) != 2+1234 {
		t.Fatalf("%s: keep:* by keys %v, sess:* by pattern %v, all %v; want 2, 1234 and 1236",
			name, byKeys, byPattern, metrictest.Sum(t, reg, name))
	}
}

func TestConsistencyOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	ctx := context.Background()
	for _, v := range []int64{2, 1, 2} {
		if _, err := c.SetVersioned(ctx, "doc:{7}", []byte("x"), v, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if skew, dup := metrictest.Sum(t, reg, "cachewatch_write_skew_total"), metrictest.Sum(t, reg, "cachewatch_duplicate_version_writes_total"); skew != 1 || dup != 1 {
		t.Fatalf("skew %v dup %v on the cluster, want 1 and 1", skew, dup)
	}
	keys := fill(t, rdb, "cart:", 900) // spread over every master
	n, err := c.Invalidate(ctx, keys[:100]...)
	if err != nil || n != 100 {
		t.Fatalf("Invalidate on the cluster = %d, %v; want 100", n, err)
	}
	n, err = c.InvalidateMatch(ctx, "cart:*")
	if err != nil || n != 800 {
		t.Fatalf("InvalidateMatch on the cluster = %d, %v; want 800", n, err)
	}
	if first, err := c.FirstSeen(ctx, "idem:{7}:msg", time.Minute); err != nil || !first {
		t.Fatalf("FirstSeen on the cluster = %v, %v", first, err)
	}
}

// fill writes n keys prefix0…prefix(n-1) and returns them.
func fill(t *testing.T, rdb redis.UniversalClient, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	_, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(i)
			p.Set(context.Background(), keys[i], "v", time.Hour)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A check cut off by the caller's deadline while Redis is paused returns by
// the deadline, and its SET landing later is undone so that a retry of the
// work is not mistaken for a duplicate.
func TestFirstSeenPausedRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t) // default options: no ContextTimeoutEnabled
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	returned := &commandsReturned{cmds: make(chan returnedCmd, 8)}
	rdb.AddHook(returned)
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	first, err := c.FirstSeen(ctx, "idem:{paused}", time.Hour)
	srv.Resume()
	if first || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FirstSeen on a paused Redis = %v, %v; want a deadline error", first, err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_idempotency_checks_total", "result", "error"); got != 1 {
		t.Fatalf("idempotency{error} = %v, want 1", got)
	}
	// The SET sent while Redis was paused returns once it resumes; if it
	// was stored, the client undoes it (UNLINK) once it sees it land.
	if set := returned.next(t); set.name != "set" {
		t.Fatalf("first command returned = %s, want the check's SET", set.name)
	} else if set.err == nil {
		if undo := returned.next(t); undo.name != "unlink" {
			t.Fatalf("command after the late SET = %s, want its UNLINK", undo.name)
		}
	}
	if srv.Client(t).Exists(context.Background(), "idem:{paused}").Val() != 0 {
		t.Fatal("the abandoned idempotency mark stayed: a retry would be skipped as a duplicate")
	}
	if first, err := c.FirstSeen(context.Background(), "idem:{paused}", time.Hour); err != nil || !first {
		t.Fatalf("retry after the failed check = %v, %v; want first", first, err)
	}
}

func TestConsistencyRedisFailures(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	// No command retries: each failure below is reported at once.
	c := lockClient(t, redistest.NewClient(t, &redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1}), reg, nil)
	if _, err := c.SetVersioned(context.Background(), "doc:{1}", []byte("x"), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.SetVersioned(ctx, "doc:{1}", []byte("y"), 2, time.Minute)
	cancel()
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, instrument.ErrRedis) {
		t.Fatalf("SetVersioned on a paused Redis = %v, want only the deadline", err)
	}
	srv.Kill()
	for name, call := range map[string]func() error{
		"SetVersioned": func() error {
			_, err := c.SetVersioned(context.Background(), "doc:{1}", []byte("z"), 3, time.Minute)
			return err
		},
		"GetVersioned": func() error { _, _, err := c.GetVersioned(context.Background(), "doc:{1}"); return err },
		"SlideTTL":     func() error { _, err := c.SlideTTL(context.Background(), "doc:{1}", time.Minute, 0); return err },
		"Invalidate":   func() error { _, err := c.Invalidate(context.Background(), "doc:{1}"); return err },
		"InvalidateMatch": func() error {
			_, err := c.InvalidateMatch(context.Background(), "doc:*")
			return err
		},
	} {
		if err := call(); !errors.Is(err, instrument.ErrRedis) {
			t.Fatalf("%s on a killed Redis = %v, want ErrRedis", name, err)
		}
	}
	if got := metrictest.Sum(t, reg, "cachewatch_write_skew_total") + metrictest.Sum(t, reg, "cachewatch_duplicate_version_writes_total"); got != 0 {
		t.Fatalf("failed writes counted as skew or duplicates: %v", got)
	}
}

// commandsReturned is a go-redis hook that hands over each command's name
// and error once it has returned, in order.
type commandsReturned struct{ cmds chan returnedCmd }

type returnedCmd struct {
	name string
	err  error
}

func (h *commandsReturned) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandsReturned) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *commandsReturned) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.cmds <- returnedCmd{name: cmd.Name(), err: err}
		return err
	}
}

// next returns the next command to return, bounded by a liveness bound.
func (h *commandsReturned) next(t *testing.T) returnedCmd {
	t.Helper()
	select {
	case cmd := <-h.cmds:
		return cmd
	case <-time.After(poll.Bound):
		t.Fatal("no command returned")
		return returnedCmd{}
	}
}
