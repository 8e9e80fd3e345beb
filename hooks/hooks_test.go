package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/origin"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

const (
	attempts = "cachewatch_lock_attempts_total"
	lost     = "cachewatch_locks_lost_total"
	lookups  = "cachewatch_cache_lookups_total"
	bursts   = "cachewatch_cache_miss_bursts_total"
	cmdDur   = "cachewatch_redis_command_duration_seconds"
	cmdErrs  = "cachewatch_redis_command_errors_total"
	pipeDur  = "cachewatch_redis_pipeline_duration_seconds"
	scrDur   = "cachewatch_redis_script_duration_seconds"
	noscript = "cachewatch_redis_script_noscript_total"
)

// quiet turns off go-redis's connection handshake extras (CLIENT SETINFO,
// CLIENT MAINT_NOTIFICATIONS), which pass through hooks too and which an
// older redis-server answers with errors, so that tests count only their own
// traffic.
func quiet(o *redis.Options) *redis.Options {
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o
}

// hooked returns a client of a fresh redis-server with a new hook on a new
// registry.
func hooked(t *testing.T, opts hooks.Options) (*redis.Client, *prometheus.Registry) {
	t.Helper()
	h, reg := newHook(t, opts)
	return hookedClient(t, h), reg
}

// newHook returns a new hook on a new registry, with keygrouptest.Named's
// key groups unless opts has some.
func newHook(t *testing.T, opts hooks.Options) (*hooks.Hook, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if opts.KeyGroups == nil {
		opts.KeyGroups = keygrouptest.Named(t)
	}
	h, err := hooks.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h, reg
}

// hookedClient returns a client of a fresh redis-server with h added.
func hookedClient(t *testing.T, h *hooks.Hook) *redis.Client {
	t.Helper()
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: redistest.Start(t).Addr}))
	rdb.AddHook(h)
	return rdb
}

func TestLockAttemptsContentionAndRetries(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{})
	ctx := context.Background()
	// 700 uncontended locks, then 300 contenders on the first 300 of them:
	// 1000 first attempts of which 300 are busy.
	for i := 0; i < 700; i++ {
		if ok, err := rdb.SetNX(ctx, fmt.Sprintf("lock:order:%d", i), "owner-a", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
	}
	for i := 0; i < 300; i++ {
		if ok, _ := rdb.SetNX(ctx, fmt.Sprintf("lock:order:%d", i), "owner-b", time.Minute).Result(); ok {
			t.Fatalf("lock %d acquired twice", i)
		}
	}
	// 100 of the losers retry with the same token (as lock libraries do):
	// still busy, then acquired once the owner let go.
	for i := 0; i < 100; i++ {
		if ok, _ := rdb.SetNX(ctx, fmt.Sprintf("lock:order:%d", i), "owner-b", time.Minute).Result(); ok {
			t.Fatalf("lock %d acquired while held", i)
		}
	}
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("lock:order:%d", i)
		rdb.Del(ctx, key)
		if ok, err := rdb.SetNX(ctx, key, "owner-b", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("retry %d: %v %v", i, ok, err)
		}
	}
	// SET NX EX, raw SET ... NX in upper case, and legacy SETNX count too;
	// SET without NX does not.
	rdb.SetNX(ctx, "lock:job:{7}", "x", 90*time.Second)
	rdb.Do(ctx, "SET", "lock:job:{7}", "y", "NX", "PX", "1000")
	rdb.Do(ctx, "SETNX", "lock:job:{8}", "z")
	rdb.Set(ctx, "lock:job:{9}", "plain", 0)

	// A busy first attempt retried within the horizon was a waiting
	// caller's (mode wait: contention); the 200 never retried, and the job
	// lock's busy one, were try-once callers' that skipped the work.
	settled(t, reg, attempts, map[string]float64{
		"key_group=lock:order:*,result=acquired,attempt=first":           700,
		"key_group=lock:order:*,result=busy,attempt=first":               300,
		"key_group=lock:order:*,result=busy,attempt=first,mode=wait":     100,
		"key_group=lock:order:*,result=busy,attempt=first,mode=try_once": 200,
		"key_group=lock:order:*,result=busy,attempt=retry,mode=wait":     100,
		"key_group=lock:order:*,result=acquired,attempt=retry":           50,
		"key_group=lock:job:*,result=acquired,attempt=first":             2,
		"key_group=lock:job:*,result=busy,attempt=first,mode=try_once":   1,
		"key_group=lock:job:*": 3,
		"result=error":         0,
	})
	// Each acquisition is timed once: from its first attempt to success.
	expect(t, reg, "cachewatch_lock_acquire_duration_seconds", map[string]float64{
		"key_group=lock:order:*,outcome=acquired": 750, "key_group=lock:job:*,outcome=acquired": 2, "outcome=error": 0,
	})
}

func TestCacheLookupsAndMissBursts(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(1_700_000_000, 0))
	groups := keygrouptest.Named(t, keygroup.Glob("product:*", "product"))
	rdb, reg := hooked(t, hooks.Options{
		MissBurstThreshold: 10, MissBurstWindow: time.Second, Clock: clock, KeyGroups: groups,
	})
	ctx := context.Background()
	for i := 0; i < 25; i++ {
		rdb.Set(ctx, fmt.Sprintf("user:%d", i), "v", time.Minute)
	}
	for i := 0; i < 40; i++ { // 25 hits, 15 misses
		err := rdb.Get(ctx, fmt.Sprintf("user:%d", i)).Err()
		if i < 25 && err != nil || i >= 25 && !errors.Is(err, redis.Nil) {
			t.Fatalf("get user:%d: %v", i, err)
		}
	}
	clock.Advance(2 * time.Second) // a new burst window
	rdb.Set(ctx, "product:42", "p", time.Minute)
	rdb.HSet(ctx, "product:cart:1", "sku", "1")
	rdb.MGet(ctx, "product:42", "product:43", "product:44")                       // 1 hit, 2 misses
	rdb.HGet(ctx, "product:cart:1", "sku")                                        // hit
	rdb.HGet(ctx, "product:cart:1", "nope")                                       // miss
	rdb.HMGet(ctx, "product:cart:1", "sku", "a", "b", "c")                        // 1 hit, 3 misses
	rdb.GetEx(ctx, "product:none", time.Minute)                                   // miss
	rdb.Do(ctx, "GET", "product:42")                                              // hit, via Do in upper case
	rdb.Get(origin.Instrumented(ctx), "product:nope")                             // cachewatch's own: not counted
	rdb.Do(origin.Instrumented(ctx), "SET", "product:lock", "t", "NX", "PX", 100) // not counted either
	for i := 0; i < 3; i++ {                                                      // 3 more misses: product has 10 → a burst
		rdb.Get(ctx, "product:x")
	}

	expect(t, reg, lookups, map[string]float64{
		"key_group=user:*,result=hit":    25,
		"key_group=user:*,result=miss":   15,
		"key_group=product,result=hit":   4,
		"key_group=product,result=miss":  10,
		"key_group=product,result=error": 0,
	})
	expect(t, reg, bursts, map[string]float64{"key_group=user:*": 1, "key_group=product": 1})
	expect(t, reg, attempts, map[string]float64{"": 0})
	// Instrumented commands are still timed.
	expect(t, reg, cmdDur, map[string]float64{"command=get": 40 + 3 + 1 + 1, "command=set": 25 + 1 + 1})
}

func TestScriptsByName(t *testing.T) {
	checkout := redis.NewScript(`return redis.call("INCR", KEYS[1])`)
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end -- app`)
	rdb, reg := hooked(t, hooks.Options{Scripts: []hooks.Script{
		{Name: "checkout", Src: `return redis.call("INCR", KEYS[1])`},
		{Name: "app_release", SHA: strings.ToUpper(release.Hash()), Role: hooks.RoleRelease},
	}})
	ctx := context.Background()
	if err := checkout.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 25
	for i := 0; i < n; i++ {
		if err := checkout.Run(ctx, rdb, []string{"counter:1"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The script cache is flushed: the next Run gets NOSCRIPT and falls back
	// to EVAL, which the hook names by body.
	rdb.ScriptFlush(ctx)
	if err := checkout.Run(ctx, rdb, []string{"counter:1"}).Err(); err != nil {
		t.Fatal(err)
	}
	// An unregistered script is "unknown", never its SHA.
	anon := redis.NewScript(`return 1`)
	anon.Run(ctx, rdb, nil)
	anon.Run(ctx, rdb, nil)
	// A release by a contender whose attempt was just answered busy is the
	// cleanup after a failed acquisition (redsync does this), not a loss.
	rdb.Set(ctx, "lock:cart:1", "owner", time.Minute)
	rdb.SetNX(ctx, "lock:cart:1", "contender", time.Minute)
	if n, err := release.Run(ctx, rdb, []string{"lock:cart:1"}, "contender").Int(); err != nil || n != 0 {
		t.Fatalf("cleanup release: %v %v", n, err)
	}
	// An owner-checked release of someone else's lock is a lost lock; this
	// script answers 0 for an expired lock too, so the reason says both.
	rdb.Set(ctx, "lock:cart:9", "other-owner", time.Minute)
	if n, err := release.Run(ctx, rdb, []string{"lock:cart:9"}, "me").Int(); err != nil || n != 0 {
		t.Fatalf("release: %v %v", n, err)
	}
	if n, err := release.Run(ctx, rdb, []string{"lock:cart:9"}, "other-owner").Int(); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}

	expect(t, reg, scrDur, map[string]float64{
		"script=checkout,command=evalsha":    n + 1,
		"script=checkout,command=eval":       1,
		"script=unknown,command=evalsha":     2,
		"script=unknown,command=eval":        1,
		"script=app_release,command=evalsha": 3,
		"script=app_release,command=eval":    1,
	})
	expect(t, reg, noscript, map[string]float64{"script=checkout": 1, "script=unknown": 1, "script=app_release": 1})
	// go-redis answers NOSCRIPT itself, with EVAL: no command failed.
	expect(t, reg, cmdErrs, map[string]float64{"": 0})
	expect(t, reg, lost, map[string]float64{"key_group=lock:cart:*,reason=expired_or_not_owner": 1, "": 1})
	for _, v := range labelValues(t, reg, scrDur, "script") {
		if v != "checkout" && v != "unknown" && v != "app_release" {
			t.Errorf("unexpected script label %q", v)
		}
	}
}

func TestPipelinesAndTransactions(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{})
	ctx := context.Background()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 10; i++ {
			p.Get(ctx, fmt.Sprintf("page:%d", i))
		}
		p.SetNX(ctx, "lock:page", "t", time.Second)
		return nil
	})
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("pipeline: %v", err)
	}
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "visits")
		p.Expire(ctx, "visits", time.Minute)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, reg, pipeDur, map[string]float64{"kind=pipeline": 1, "kind=tx": 1})
	expect(t, reg, cmdDur, map[string]float64{
		"command=get": 10, "command=set": 1, "command=incr": 1, "command=expire": 1, "command=multi": 1, "command=exec": 1,
	})
	expect(t, reg, lookups, map[string]float64{"key_group=page:*,result=miss": 10})
	expect(t, reg, attempts, map[string]float64{"key_group=lock:page,result=acquired,attempt=first": 1})
	expect(t, reg, cmdErrs, map[string]float64{"": 0})
}

func TestUnknownCommandsFoldIntoOther(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{})
	ctx := context.Background()
	rdb.Do(ctx, "DEBUG", "SLEEP", "0")
	rdb.Do(ctx, "LOLWUT")
	rdb.Do(ctx, "no-such-command-"+strings.Repeat("x", 40))
	rdb.Do(ctx, "PING")
	expect(t, reg, cmdDur, map[string]float64{"command=other": 3, "command=ping": 1})
	expect(t, reg, cmdErrs, map[string]float64{"command=other,error_class=other": 1})
	for _, v := range labelValues(t, reg, cmdDur, "command") {
		if v != "other" && v != "ping" && v != "hello" && v != "client" {
			t.Errorf("unexpected command label %q", v)
		}
	}
}

func TestSignalsOff(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{Signals: hooks.Commands})
	ctx := context.Background()
	rdb.Get(ctx, "user:1")
	rdb.SetNX(ctx, "lock:1", "t", time.Second)
	expect(t, reg, cmdDur, map[string]float64{"command=get": 1})
	for _, name := range []string{lookups, attempts, scrDur, noscript} {
		if s := metrictest.Series(t, reg, name); s != nil {
			t.Errorf("%s exported with the signal off", name)
		}
	}
}

func TestFunctionsByName(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{Scripts: []hooks.Script{{Name: "greeter", Function: "hello"}}})
	ctx := context.Background()
	lib := "#!lua name=greetings\n" +
		"redis.register_function('hello', function(keys, args) return 1 end)\n" +
		"redis.register_function{function_name='hello_ro', callback=function(keys, args) return 2 end, flags={'no-writes'}}"
	if err := rdb.FunctionLoad(ctx, lib).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := rdb.FCall(ctx, "hello", nil).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.FCallRO(ctx, "hello_ro", nil).Err(); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, scrDur, map[string]float64{"script=greeter,command=fcall": 3, "script=unknown,command=fcall_ro": 1})
}
