package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// hookOn adds a new hook on a new registry to rdb.
func hookOn(t *testing.T, rdb interface{ AddHook(redis.Hook) }, opts hooks.Options) *prometheus.Registry {
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
	rdb.AddHook(h)
	return reg
}

func TestErrorClasses(t *testing.T) {
	t.Run("timeout", timeoutClass)
	t.Run("connection", connectionClass)
	t.Run("oom", oomClass)
	t.Run("noperm and wrongtype", nopermAndWrongtypeClasses)
	t.Run("busy", busyClass)
	t.Run("unavailable", unavailableClass)
}

// timeoutClass checks that a read past its timeout is classed timeout.
func timeoutClass(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{})
	if err := rdb.Do(ctx, "DEBUG", "SLEEP", "0.5").Err(); err == nil {
		t.Fatal("DEBUG SLEEP 0.5 with a 100ms read timeout succeeded")
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=other,error_class=timeout": 1, "": 1})
}

// connectionClass checks that a command to a server that is gone is
// classed connection, and that a failed read is no cache lookup: it got no
// answer from the cache, hit or miss.
func connectionClass(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Kill()
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: addr, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{})
	if err := rdb.Get(ctx, "user:1").Err(); err == nil {
		t.Fatal("GET on a killed server succeeded")
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=get,error_class=connection": 1, "": 1})
	expect(t, reg, lookups, map[string]float64{"": 0})
}

// oomClass checks that a write refused under maxmemory is classed oom.
func oomClass(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr}))
	reg := hookOn(t, rdb, hooks.Options{})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET under maxmemory 1: %v", err)
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=set,error_class=oom": 1, "": 1})
}

// nopermAndWrongtypeClasses checks that a command the ACL refuses is
// classed noperm, and one on a key of the wrong type other.
func nopermAndWrongtypeClasses(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">secret", "~*", "+@all", "-set").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr, Username: "reader", Password: "secret"}))
	reg := hookOn(t, rdb, hooks.Options{})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("SET without permission: %v", err)
	}
	admin.LPush(ctx, "list", "x")
	if err := rdb.Get(ctx, "list").Err(); err == nil {
		t.Fatal("GET of a list succeeded")
	}
	expect(t, reg, cmdErrs, map[string]float64{
		"command=set,error_class=noperm": 1, "command=get,error_class=other": 1, "": 2,
	})
}

// busyClass checks that a command refused while a script runs too long
// is classed busy.
func busyClass(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, "--lua-time-limit", "10")
	looper := srv.Client(t)
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{})
	done := make(chan error, 1)
	go func() { done <- looper.Eval(ctx, "while true do end", nil).Err() }()
	// The script is sent on another connection: ping until it runs.
	busy := 0
	poll.Until(t, "the server to answer BUSY", func() bool {
		err := rdb.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY ") {
			busy++
		} else if err != nil {
			t.Fatalf("ping: %v", err)
		}
		return busy > 0
	})
	if err := rdb.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("killed script returned no error")
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=ping,error_class=busy": float64(busy), "": float64(busy)})
}

func TestClusterCountsEachCommandOnce(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = cc.Close() })
	reg := hookOn(t, cc, hooks.Options{Name: "cluster"})

	const locks, contended, reads = 300, 120, 200
	for i := 0; i < locks; i++ { // keys spread over every node
		if ok, err := cc.SetNX(ctx, fmt.Sprintf("lock:invoice:%d", i), "a", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
	}
	for i := 0; i < contended; i++ {
		if ok, _ := cc.SetNX(ctx, fmt.Sprintf("lock:invoice:%d", i), "b", time.Minute).Result(); ok {
			t.Fatalf("lock %d acquired twice", i)
		}
	}
	for i := 0; i < reads; i++ { // even keys exist, odd ones miss
		if i%2 == 0 {
			cc.Set(ctx, fmt.Sprintf("invoice:%d", i), "v", time.Minute)
		}
		cc.Get(ctx, fmt.Sprintf("invoice:%d", i))
	}
	// A pipeline spanning all nodes is one pipeline with 30 commands.
	cmds, _ := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 30; i++ {
			p.Get(ctx, fmt.Sprintf("invoice:%d", i))
		}
		return nil
	})
	if len(cmds) != 30 {
		t.Fatalf("pipeline ran %d commands", len(cmds))
	}

	settled(t, reg, attempts, map[string]float64{
		"key_group=lock:invoice:*,result=acquired,attempt=first":           locks,
		"key_group=lock:invoice:*,result=busy,attempt=first,mode=try_once": contended,
		"": locks + contended,
	})
	expect(t, reg, lookups, map[string]float64{
		"key_group=invoice:*,result=hit": reads/2 + 15, "key_group=invoice:*,result=miss": reads/2 + 15,
	})
	expect(t, reg, cmdDur, map[string]float64{"client=cluster,command=get": reads + 30})
	expect(t, reg, pipeDur, map[string]float64{"kind=pipeline": 1})
}

// TestClusterHookPerNodeDoubleCounts shows why the hook belongs on the
// cluster client only: added in OnNewNode as well, it sees every command a
// second time on its way through the node client.
func TestClusterHookPerNodeDoubleCounts(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg, KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = cc.Close() })
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(h) })
	cc.AddHook(h)
	for i := 0; i < 10; i++ {
		cc.Get(ctx, fmt.Sprintf("invoice:%d", i))
	}
	expect(t, reg, lookups, map[string]float64{"key_group=invoice:*,result=miss": 20})
}

func TestMovedErrors(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	// A plain client of one node sees MOVED for keys of the other nodes'
	// slots (a cluster client would follow the redirection).
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: cluster.Nodes[0].Addr, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{})
	moved := 0
	for i := 0; i < 50; i++ {
		err := rdb.Get(ctx, fmt.Sprintf("user:%d", i)).Err()
		if _, ok := redis.IsMovedError(err); ok {
			moved++
		} else if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("get: %v", err)
		}
	}
	if moved == 0 {
		t.Fatal("no key of 50 was on another node")
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=get,error_class=moved": float64(moved), "": float64(moved)})
}

func TestPoolCollector(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr, PoolSize: 1, PoolTimeout: 100 * time.Millisecond, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{Name: "sessions", Pool: rdb})
	conn := rdb.Conn() // holds the pool's only connection
	if err := conn.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, "cachewatch_redis_pool_connections", map[string]float64{
		"client=sessions,state=in_use": 1, "client=sessions,state=idle": 0,
	})
	if err := rdb.Get(ctx, "user:1").Err(); !errors.Is(err, redis.ErrPoolTimeout) {
		t.Fatalf("GET with the pool drained: %v", err)
	}
	expect(t, reg, "cachewatch_redis_pool_timeouts_total", map[string]float64{"client=sessions": 1})
	expect(t, reg, cmdErrs, map[string]float64{"client=sessions,command=get,error_class=timeout": 1})
	// A caller that waits for the held connection and gets it.
	got := make(chan error, 1)
	go func() { got <- rdb.Get(ctx, "user:1").Err() }()
	poll.Until(t, "the GET to ask the pool for a connection", func() bool { return rdb.PoolStats().PendingRequests > 0 })
	_ = conn.Close()
	if err := <-got; !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	expect(t, reg, "cachewatch_redis_pool_connections", map[string]float64{
		"client=sessions,state=in_use": 0, "client=sessions,state=idle": 1,
	})
	// The collector reports exactly what go-redis counted.
	st := rdb.PoolStats()
	expect(t, reg, "cachewatch_redis_pool_waits_total", map[string]float64{"client=sessions": float64(st.WaitCount)})
	expect(t, reg, "cachewatch_redis_pool_wait_seconds_total", map[string]float64{"client=sessions": time.Duration(st.WaitDurationNs).Seconds()})
	expect(t, reg, "cachewatch_redis_pool_hits_total", map[string]float64{"client=sessions": float64(st.Hits)})
	expect(t, reg, "cachewatch_redis_pool_misses_total", map[string]float64{"client=sessions": float64(st.Misses)})
	expect(t, reg, "cachewatch_redis_pool_stale_connections_total", map[string]float64{"client=sessions": float64(st.StaleConns)})
}

func TestRingCountsEachCommandOnce(t *testing.T) {
	ctx := context.Background()
	ring := redis.NewRing(&redis.RingOptions{DisableIdentity: true, Addrs: map[string]string{
		"a": redistest.Start(t).Addr, "b": redistest.Start(t).Addr,
	}})
	t.Cleanup(func() { _ = ring.Close() })
	reg := hookOn(t, ring, hooks.Options{Name: "ring"})
	for i := 0; i < 40; i++ {
		ring.SetNX(ctx, fmt.Sprintf("lock:ring:%d", i), "a", time.Minute)
		ring.Get(ctx, fmt.Sprintf("ring:%d", i))
	}
	expect(t, reg, attempts, map[string]float64{"key_group=lock:ring:*,result=acquired,attempt=first": 40, "": 40})
	expect(t, reg, lookups, map[string]float64{"key_group=ring:*,result=miss": 40, "": 40})
	expect(t, reg, cmdDur, map[string]float64{"client=ring,command=get": 40})
}

// go-redis opens a connection with a handshake sent through the hooks
// (HELLO, CLIENT MAINT_NOTIFICATIONS, a pipeline of two CLIENT SETINFO),
// which a Redis older than 7.2 partly answers with errors that go-redis
// ignores. A fresh client with go-redis's default options sending one
// pipeline counts one pipeline, its own commands, and no error.
func TestHandshakeIsNotMeasured(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr}) // the defaults: identity and maintenance notifications on
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	ctx := context.Background()
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v", 0)
		p.Get(ctx, "k")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, pipeDur, map[string]float64{"": 1})
	expect(t, reg, cmdErrs, map[string]float64{"": 0})
	expect(t, reg, cmdDur, map[string]float64{"": 2, "command=set": 1, "command=get": 1})
	// A CLIENT command that is not a connection's setup is measured.
	if err := rdb.ClientID(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, cmdDur, map[string]float64{"command=client": 1})
}

// unavailableClass checks that a server that answers but cannot serve (a
// replica refusing a write: READONLY) is classed unavailable, as LOADING,
// MASTERDOWN, CLUSTERDOWN and TRYAGAIN are.
func unavailableClass(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: replica.Addr, MaxRetries: -1}))
	reg := hookOn(t, rdb, hooks.Options{})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY ") {
		t.Fatalf("SET on a replica: %v", err)
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=set,error_class=unavailable": 1, "": 1})
}
