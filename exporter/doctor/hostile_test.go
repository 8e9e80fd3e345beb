package doctor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/hostileredis"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The doctor survives every hostile reply the exporter does: the run ends
// with the node reported down and why, and an error wrapping ErrNoNode.
func TestDoctorSurvivesHostileReplies(t *testing.T) {
	ctx := context.Background()
	for _, m := range hostileredis.Modes {
		t.Run(m.Name, func(t *testing.T) {
			srv := hostileredis.Start(t, m.Mode, "INFO")
			r, err := doctor.Run(ctx, doctor.Options{Interval: 10 * time.Millisecond, MaxDuration: time.Minute,
				Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Mode: exporter.ModeStandalone}}})
			if !errors.Is(err, doctor.ErrNoNode) || r == nil || len(r.Nodes) != 1 || r.Nodes[0].Up {
				t.Fatalf("report %+v, err %v; want the node down and ErrNoNode", r, err)
			}
			if len(r.Incomplete) == 0 || !strings.Contains(r.Incomplete[0], "not sampled") || r.Nodes[0].Error == "" {
				t.Fatalf("the report does not say why: %+v", r)
			}
		})
	}
}

// --max-duration bounds the whole run: against a keyspace whose pass
// would take minutes at the pace asked, the run stops at its limit and
// reports what it sampled, incomplete.
func TestDoctorHonoursMaxDuration(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range 20_000 {
		pipe.Set(ctx, fmt.Sprintf("item:%d", i), "v", 0)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	const limit = 3 * time.Second
	start := time.Now()
	r, err := doctor.Run(ctx, doctor.Options{Interval: 10 * time.Millisecond, MaxDuration: limit,
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Sample: exporter.SampleOptions{KeysPerSecond: 1000}}})
	took := time.Since(start)
	if err != nil || r == nil {
		t.Fatalf("report %+v, err %v", r, err)
	}
	// A generous bound, not a timing claim: the run ends at its limit
	// (the pass alone would take 20 s), and a run that gave each of its
	// two samples the whole limit would take twice that.
	if took >= 2*limit {
		t.Errorf("the run took %s with MaxDuration %s", took, limit)
	}
	if r.Complete() || r.Nodes[0].Complete || !strings.Contains(strings.Join(r.Incomplete, "\n"), "keyspace not covered") {
		t.Fatalf("a run cut short is incomplete: %+v", r)
	}
	t.Logf("MaxDuration %s: the run took %s", limit, took)
}
