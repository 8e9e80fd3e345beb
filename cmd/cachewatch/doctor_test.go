package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestDoctorCommandExitStatus(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "lock:job:1", "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	args := []string{"doctor", "--redis", "redis://" + srv.Addr, "--interval", "50ms", "--format", "json"}
	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("healthy Redis: exit %d, %s", code, errOut.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if len(r.Nodes) != 1 || !r.Nodes[0].Up || r.Critical() {
		t.Fatalf("report %+v", r)
	}

	// A lock without TTL is critical: exit 1, so a deploy gate fails.
	if err := rdb.Set(ctx, "lock:job:2", "tok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, []string{"doctor", "--redis", "redis://" + srv.Addr, "--interval", "50ms"}, &out, &errOut); code != 1 {
		t.Fatalf("lock without TTL: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "CRITICAL  locks_without_ttl  lock:job:*") {
		t.Fatalf("text report:\n%s", out.String())
	}

	// Nothing to sample: exit 3 with a clear error.
	addr := freeListenAddr(t)
	errOut.Reset()
	if code := run(ctx, []string{"doctor", "--redis.addr", addr}, &out, &errOut); code != 3 ||
		!strings.Contains(errOut.String(), "no Redis node could be sampled") {
		t.Fatalf("unreachable: exit %d, %s", code, errOut.String())
	}
}
