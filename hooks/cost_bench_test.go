package hooks_test

import (
	"context"
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
		name string
		cmd  redis.Cmder
	}{{"GET", get}, {"SET_NX", setNX}, {"EVALSHA", eval}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			process := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
			_ = process(ctx, c.cmd)
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := threadCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = process(ctx, c.cmd)
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
