package hooks_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
)

// BenchmarkHookCost isolates the hook: ProcessHook around a next that does
// nothing, so the figure is the hook's own time per command, free of the
// scheduling noise of BenchmarkHookOverhead's stub connection. cpu-ns/op is
// the thread's CPU time, which a loaded machine inflates less than ns/op.
func BenchmarkHookCost(b *testing.B) {
	ctx := context.Background()
	release := hooks.LockLibraryScripts()[2]
	get := redis.NewStringCmd(ctx, "get", "user:1234")
	get.SetVal("hello")
	setNX := redis.NewBoolCmd(ctx, "set", "lock:order:1234", "tok-8f3a9c0e", "px", 10000, "nx")
	setNX.SetVal(true)
	eval := redis.NewCmd(ctx, "evalsha", redis.NewScript(release.Src).Hash(), 1, "lock:order:1234", "tok-8f3a9c0e")
	eval.SetVal(int64(1))
	cases := []struct {
		name  string
		cmds  []redis.Cmder
		reply error // next's result: nil, or redis.Nil for a busy lock
	}{
		{"GET", []redis.Cmder{get}, nil},
		{"SET_NX", []redis.Cmder{setNX}, nil},
		{"EVALSHA", []redis.Cmder{eval}, nil},
		// One caller retrying a busy lock with its token: the retry path.
		{"SET_NX_busy_retry", []redis.Cmder{setNX}, redis.Nil},
		// Busy first attempts by ever new tokens, none retried: the path of
		// a try-once job's losers, which fills the table of recent busy
		// attempts and makes it evict.
		{"SET_NX_busy_first", busyTokens(ctx, 1<<14), redis.Nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			process := h.ProcessHook(func(context.Context, redis.Cmder) error { return c.reply })
			for _, cmd := range c.cmds {
				_ = process(ctx, cmd)
			}
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := threadCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = process(ctx, c.cmds[i%len(c.cmds)])
			}
			b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("pipeline100", func(b *testing.B) {
		h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		cmds := make([]redis.Cmder, 100)
		for i := range cmds {
			cmds[i] = get
		}
		process := h.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
		_ = process(ctx, cmds)
		b.ReportAllocs()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu := threadCPU()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = process(ctx, cmds)
		}
		b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N*len(cmds)), "cpu-ns/cmd")
	})
}

// busyTokens are n SET NX commands on one lock, each with its own token,
// answered busy.
func busyTokens(ctx context.Context, n int) []redis.Cmder {
	out := make([]redis.Cmder, n)
	for i := range out {
		c := redis.NewBoolCmd(ctx, "set", "lock:job:nightly", fmt.Sprintf("tok-%08x", i), "px", 30000, "nx")
		c.SetVal(false)
		out[i] = c
	}
	return out
}
