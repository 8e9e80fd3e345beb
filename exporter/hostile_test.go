package exporter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/hostileredis"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// No reply can take the exporter down. Whatever a hostile endpoint
// answers to INFO, to the read of a lock's value or to SCAN — a length out
// of range, 4 GiB claimed and never sent, 100 MB sent, bytes that are not
// the protocol, a reply cut off, a cursor that loops — the sample ends
// without a panic or an allocation of what was claimed, the node reports up
// 0 with the reason counted (class "malformed"; "connection" for the reply
// cut off) and is not dialled again before its backoff, and another target
// on the same registry is sampled and scraped all the same.
func TestHostileRepliesTakeOnlyTheirNodeDown(t *testing.T) {
	healthy := redistest.Start(t)
	ctx := context.Background()
	for _, m := range hostileredis.Modes {
		for _, cmd := range []string{"INFO", "GETRANGE"} {
			if m.Mode == hostileredis.LoopingCursor && cmd != "INFO" {
				continue // SCAN's reply, whatever the command
			}
			t.Run(m.Name+" to "+cmd, func(t *testing.T) {
				srv := hostileredis.Start(t, m.Mode, cmd)
				clk := clockwork.NewFakeClockAt(time.Now())
				reg := prometheus.NewRegistry()
				bad := hostileExporter(t, reg, "hostile", srv.Addr, clk)
				good := hostileExporter(t, reg, "healthy", healthy.Addr, clk)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				s := bad.Sample(ctx)[0]
				runtime.ReadMemStats(&after)
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
					t.Errorf("the sample allocated %d MiB", grew>>20)
				}
				if g := good.Sample(ctx)[0]; !g.Up {
					t.Fatalf("the healthy target beside it: %v", g.Err)
				}
				wantClass := snapshot.ClassMalformed
				if m.Mode == hostileredis.MidReplyClose {
					wantClass = snapshot.ClassConnection
				}
				var se *snapshot.StageError
				if s.Up || !errors.As(s.Err, &se) || se.Class != wantClass || srv.Hostile.Load() == 0 {
					t.Fatalf("up %v, err %v (%d hostile replies sent); want down, class %s", s.Up, s.Err, srv.Hostile.Load(), wantClass)
				}
				if wantClass == snapshot.ClassMalformed && !errors.Is(s.Err, sampler.ErrBadReply) {
					t.Errorf("err %v does not wrap ErrBadReply", s.Err)
				}
				dialled := srv.Conns.Load()
				bad.Sample(ctx) // within the backoff: not dialled again
				if srv.Conns.Load() != dialled {
					t.Errorf("dialled again within the backoff: %d connections, then %d", dialled, srv.Conns.Load())
				}
				up := func(target string) float64 {
					return metrictest.Sum(t, reg, "cachewatch_exporter_up", "target", target)
				}
				errs := metrictest.Sum(t, reg, "cachewatch_exporter_sample_errors_total", "target", "hostile", "class", string(wantClass))
				if up("hostile") != 0 || up("healthy") != 1 || errs != 1 {
					t.Errorf("up hostile %v, healthy %v; %s errors %v: want 0, 1, 1", up("hostile"), up("healthy"), wantClass, errs)
				}
			})
		}
	}
}

// hostileExporter is an Exporter of one address named target, registered on reg.
func hostileExporter(t *testing.T, reg *prometheus.Registry, target, addr string, clk clockwork.Clock) *exporter.Exporter {
	t.Helper()
	e, err := exporter.New(exporter.Options{
		Name:   target,
		Clock:  clk,
		Target: exporter.Target{Addrs: []string{addr}, Mode: exporter.ModeStandalone, ReadTimeout: 10 * time.Second},
		Locks:  exporter.LockOptions{Notifications: exporter.NotifyOff},
	})
	must(t, err)
	t.Cleanup(func() { _ = e.Close() })
	must(t, reg.Register(e))
	return e
}

// The limits are the options': an INFO reply just over MaxInfoReply is
// refused, one within it read.
func TestReplyLimitsAreTheOptions(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		limit int
		up    bool
	}{{1 << 20, true}, {200, false}} {
		e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, MaxInfoReply: c.limit})
		must(t, err)
		s := e.Sample(ctx)[0]
		_ = e.Close()
		if s.Up != c.up || (!c.up && !errors.Is(s.Err, sampler.ErrReplyTooLarge)) {
			t.Errorf("MaxInfoReply %d: up %v, err %v; want up %v", c.limit, s.Up, s.Err, c.up)
		}
		if !c.up && !containsAll(s.Err.Error(), "INFO", fmt.Sprint(c.limit)) {
			t.Errorf("the error does not name INFO and the limit: %v", s.Err)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
