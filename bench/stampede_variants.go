package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rediscache "github.com/go-redis/cache/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
	"golang.org/x/sync/singleflight"

	"github.com/cachewatch/cachewatch/instrument"
)

// stampedeFresh is how long every variant treats a value as fresh in the
// stampede benchmark. After it the key is "expired": kept and served stale
// by the variants that can (cachewatch, sturdyc, lock-then-poll), gone for
// the others (naive cache-aside, go-redis/cache and rueidisaside, whose TTL
// is all they have).
const stampedeFresh = time.Second

// loader is the slow source behind every cache.
type loader func(ctx context.Context) (string, error)

// fetcher is one process's way of reading a key through its cache.
type fetcher func(ctx context.Context, key string) (string, error)

// stampedeVariant builds one process's fetcher for a library; close releases
// what it holds. Fleet marks the variants that coalesce across processes
// (one loader call per key for the fleet) and take over from a holder that
// died: BenchmarkStampedeHolderDeath runs them.
type stampedeVariant struct {
	Name  string
	Build func(p stampedeProc, load loader) (fetch fetcher, close func())
	Fleet bool
}

// stampedeProc is what a worker process gives a variant: its go-redis
// client, whose commands cmds counts, and the Redis address, for a variant
// with a client of its own (which adds the commands it sends to cmds).
type stampedeProc struct {
	rdb  *redis.Client
	addr string
	cmds *cmdCounter
}

// cmdCounter counts the commands a client sends (a pipeline's each).
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// goRedis adapts the builder of a variant that uses the process's go-redis
// client.
func goRedis(build func(rdb *redis.Client, load loader) (fetcher, func())) func(stampedeProc, loader) (fetcher, func()) {
	return func(p stampedeProc, load loader) (fetcher, func()) { return build(p.rdb, load) }
}

// stampedeVariants are the contenders of BenchmarkStampede, side by side.
var stampedeVariants = []stampedeVariant{
	{"cachewatch", goRedis(buildCachewatch), true},
	{"cachewatch-nocopies", goRedis(buildCachewatchNoCopies), false},
	{"naive", goRedis(buildNaive), false},
	{"go-redis-cache", goRedis(buildGoRedisCache), false},
	{"sturdyc", goRedis(buildSturdyc), false},
	{"rueidisaside", buildRueidisAside, true},
	{"lock-then-poll", goRedis(buildLockThenPoll), true},
	{"singleflight-get", goRedis(buildSingleflightGet), false},
	{"pubsub-floor", goRedis(buildPubSubFloor), false},
}

// variantByName returns the variant called name.
func variantByName(name string) (stampedeVariant, error) {
	for _, v := range stampedeVariants {
		if v.Name == name {
			return v, nil
		}
	}
	return stampedeVariant{}, fmt.Errorf("bench: no stampede variant %q", name)
}

// cachewatch, default options: lease granted by the read script, pub/sub
// wake-up, stale served while one refresh runs across all processes — from
// the process's copy (CacheOptions.LocalCopies, on by default).
func buildCachewatch(rdb *redis.Client, load loader) (fetcher, func()) {
	return cachewatchWith(rdb, load, instrument.CacheOptions{FreshTTL: stampedeFresh, HardTTL: time.Hour, Jitter: -1})
}

// cachewatch-nocopies: the same without process copies (LocalCopies < 0),
// so every crowd reads Redis: one read-script call per process per burst,
// shared by that process's callers.
func buildCachewatchNoCopies(rdb *redis.Client, load loader) (fetcher, func()) {
	return cachewatchWith(rdb, load, instrument.CacheOptions{FreshTTL: stampedeFresh, HardTTL: time.Hour, Jitter: -1, LocalCopies: -1})
}

func cachewatchWith(rdb *redis.Client, load loader, o instrument.CacheOptions) (fetcher, func()) {
	c, err := instrument.New(rdb, instrument.Options{
		Registerer: prometheus.NewRegistry(),
		Logger:     workerLogger(),
	})
	if err != nil {
		panic(err)
	}
	cache, err := instrument.NewCache[string](c, o)
	if err != nil {
		panic(err)
	}
	return func(ctx context.Context, key string) (string, error) {
		return cache.Fetch(ctx, key, load)
	}, func() { _ = cache.Close() }
}

// workerLogger discards cachewatch's log unless CACHEWATCH_STAMPEDE_LOG
// names a level (debug, info, warn, error): then it goes to stderr.
func workerLogger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("CACHEWATCH_STAMPEDE_LOG"))); err != nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// naive: cache-aside, GET then load and SET on a miss, no coalescing.
func buildNaive(rdb *redis.Client, load loader) (fetcher, func()) {
	return func(ctx context.Context, key string) (string, error) {
		v, err := rdb.Get(ctx, key).Result()
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, redis.Nil) {
			return "", err
		}
		if v, err = load(ctx); err != nil {
			return "", err
		}
		return v, rdb.Set(ctx, key, v, stampedeFresh).Err()
	}, func() {}
}

// go-redis/cache: Once coalesces callers within one process
// (singleflight), not across processes; no stale serving.
func buildGoRedisCache(rdb *redis.Client, load loader) (fetcher, func()) {
	cache := rediscache.New(&rediscache.Options{Redis: rdb})
	return func(ctx context.Context, key string) (string, error) {
		var v string
		err := cache.Once(&rediscache.Item{Ctx: ctx, Key: key, Value: &v, TTL: stampedeFresh,
			Do: func(*rediscache.Item) (any, error) { return load(ctx) }})
		return v, err
	}, func() {}
}

// sturdyc: in-memory cache per process with in-flight deduplication, early
// (background) refreshes and Redis as its distributed storage.
func buildSturdyc(rdb *redis.Client, load loader) (fetcher, func()) {
	cache := sturdyc.New[string](10000, 10, time.Hour, 10,
		sturdyc.WithEarlyRefreshes(stampedeFresh, stampedeFresh, time.Hour, 10*time.Millisecond),
		sturdyc.WithDistributedStorageEarlyRefreshes(sturdyStorage{rdb}, stampedeFresh))
	return func(ctx context.Context, key string) (string, error) {
		return cache.GetOrFetch(ctx, key, sturdyc.FetchFn[string](load))
	}, func() {}
}

// sturdyStorage is sturdyc's distributed storage over Redis.
type sturdyStorage struct{ rdb *redis.Client }

func (s sturdyStorage) Get(ctx context.Context, key string) ([]byte, bool) {
	b, err := s.rdb.Get(ctx, key).Bytes()
	return b, err == nil
}

func (s sturdyStorage) Set(ctx context.Context, key string, value []byte) {
	s.rdb.Set(ctx, key, value, time.Hour)
}

func (s sturdyStorage) GetBatch(ctx context.Context, keys []string) map[string][]byte {
	out := map[string][]byte{}
	for _, k := range keys {
		if b, ok := s.Get(ctx, k); ok {
			out[k] = b
		}
	}
	return out
}

func (s sturdyStorage) SetBatch(ctx context.Context, records map[string][]byte) {
	for k, v := range records {
		s.Set(ctx, k, v)
	}
}

func (s sturdyStorage) Delete(ctx context.Context, key string) { s.rdb.Del(ctx, key) }

func (s sturdyStorage) DeleteBatch(ctx context.Context, keys []string) { s.rdb.Del(ctx, keys...) }

// lock-then-poll: the seeds' pattern (seed 003). Fresh → return; otherwise
// SET lock NX PX 3000; the winner loads and writes; losers return the stale
// value if there is one, else poll every 100 ms, 10 times.
func buildLockThenPoll(rdb *redis.Client, load loader) (fetcher, func()) {
	type payload struct {
		Data      string `json:"data"`
		UpdatedAt int64  `json:"updatedAt"`
	}
	read := func(ctx context.Context, key string) (*payload, error) {
		raw, err := rdb.Get(ctx, key).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var p payload
		return &p, json.Unmarshal(raw, &p)
	}
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	return func(ctx context.Context, key string) (string, error) {
		cached, err := read(ctx, key)
		if err != nil {
			return "", err
		}
		if cached != nil && time.Since(time.UnixMilli(cached.UpdatedAt)) < stampedeFresh {
			return cached.Data, nil
		}
		lockKey, token := "lock:"+key, strconv.FormatUint(rand.Uint64(), 36)
		ok, err := rdb.SetNX(ctx, lockKey, token, 3*time.Second).Result()
		if err != nil {
			return "", err
		}
		if !ok {
			if cached != nil {
				return cached.Data, nil
			}
			for i := 0; i < 10; i++ {
				time.Sleep(100 * time.Millisecond)
				if p, err := read(ctx, key); err == nil && p != nil {
					return p.Data, nil
				}
			}
			return "", errors.New("lock-then-poll: cache generation timeout")
		}
		defer release.Run(context.WithoutCancel(ctx), rdb, []string{lockKey}, token)
		v, err := load(ctx)
		if err != nil {
			if cached != nil {
				return cached.Data, nil
			}
			return "", err
		}
		raw, _ := json.Marshal(payload{Data: v, UpdatedAt: time.Now().UnixMilli()})
		return v, rdb.Set(ctx, key, raw, time.Hour).Err()
	}, func() {}
}

// singleflight-get is a reference, not a contender: one plain GET per
// process per burst (x/sync singleflight), the value stored without expiry
// — no stale handling, lease, metrics or tracing. Its stale phase is a
// plain hit, so its stale-p99-ms is the floor for any design that reads
// Redis once per process when a crowd arrives (cachewatch's default does).
func buildSingleflightGet(rdb *redis.Client, load loader) (fetcher, func()) {
	var g singleflight.Group
	return func(ctx context.Context, key string) (string, error) {
		v, err, _ := g.Do(key, func() (any, error) {
			v, err := rdb.Get(ctx, key).Result()
			if !errors.Is(err, redis.Nil) {
				return v, err
			}
			if v, err = load(ctx); err != nil {
				return "", err
			}
			return v, rdb.Set(ctx, key, v, 0).Err()
		})
		s, _ := v.(string)
		return s, err
	}, func() {}
}

// pubsub-floor is a reference, not a contender: about the least that any
// design loading once for the fleet, with Redis as the only link between
// processes, does on a cold key. A SET NX with an expiry elects the loader
// (the round trip at the start); every process has subscribed, before the
// crowd, to one channel, on which the loader PUBLISHes the value (the round
// trip at the end); each process keeps what it received in memory and
// answers its callers from there. No script, no per-process channel, no
// stored value, metrics, breaker or batching — and no refresh: the stale
// phase is a plain in-memory hit, and a process that first asks after the
// publish may load again. It is correct only for this benchmark, and measures
// what the hop between processes itself costs on the machine: cachewatch's
// cold p99 beyond this variant's is cachewatch's own.
func buildPubSubFloor(rdb *redis.Client, load loader) (fetcher, func()) {
	const channel = "stampede-floor"
	f := &pubsubFloor{vals: map[string]*floorValue{}}
	ps := rdb.Subscribe(context.Background(), channel)
	if _, err := ps.Receive(context.Background()); err != nil { // the subscription is confirmed
		panic(err)
	}
	go func() {
		for m := range ps.Channel() {
			if key, val, ok := strings.Cut(m.Payload, "\x00"); ok {
				f.deliver(key, val, nil)
			} else {
				f.deliver(strings.TrimSuffix(m.Payload, "\x01"), "", errFloorLoad)
			}
		}
	}()
	return func(ctx context.Context, key string) (string, error) {
		fv := f.value(key)
		select {
		case <-fv.done:
			return fv.v, fv.err
		default:
		}
		return f.await(ctx, key, fv, func() error {
			won, err := rdb.SetNX(ctx, "floor-lease:"+key, 1, 10*time.Second).Result()
			if err != nil || !won {
				return err
			}
			v, err := load(ctx)
			msg := key + "\x00" + v
			if err != nil { // the waiting processes share the failure
				msg = key + "\x01"
			}
			if err := rdb.Publish(ctx, channel, msg).Err(); err != nil {
				return err
			}
			// A process that starts after this loads again (the warm-up
			// key is the same for every run of the benchmark).
			rdb.Del(ctx, "floor-lease:"+key)
			f.deliver(key, v, err)
			return err
		})
	}, func() { _ = ps.Close() }
}

// pubsubFloor is one process's memory of the floor's values.
type pubsubFloor struct {
	loads singleflight.Group
	mu    sync.Mutex
	vals  map[string]*floorValue
}

// floorValue is one key's value, or its load's failure; v and err are set
// before done closes.
type floorValue struct {
	done chan struct{}
	v    string
	err  error
}

// errFloorLoad is what the floor's callers get when another process's
// load failed.
var errFloorLoad = errors.New("pubsub-floor: the load failed")

// await runs elect once per key in the process (singleflight) — it loads
// and delivers the value if it wins the key, else returns — then waits for
// key's entry fv to be delivered, by elect or by another process's publish.
func (f *pubsubFloor) await(ctx context.Context, key string, fv *floorValue, elect func() error) (string, error) {
	if _, err, _ := f.loads.Do(key, func() (any, error) { return nil, elect() }); err != nil {
		return "", err
	}
	select { // this process loaded it, or another one does
	case <-fv.done:
		return fv.v, fv.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// value returns key's entry, created empty (done open) if new.
func (f *pubsubFloor) value(key string) *floorValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	fv := f.vals[key]
	if fv == nil {
		fv = &floorValue{done: make(chan struct{})}
		f.vals[key] = fv
	}
	return fv
}

// deliver sets key's value or failure, once (the loader's process also
// receives its own publish), and wakes the callers waiting for it.
func (f *pubsubFloor) deliver(key, v string, err error) {
	fv := f.value(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-fv.done:
	default:
		fv.v, fv.err = v, err
		close(fv.done)
	}
}
