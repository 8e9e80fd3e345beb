package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter/locks"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// cachewatch locks prints one listing when stdout is not a terminal, with
// the holder the value names, reads the password from the environment
// only, and refuses bad flags with exit 2.
func TestLocksCommand(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tok, err := lockholder.NewToken()
	must(err)
	must(rdb.Set(ctx, "lock:report:nightly", lockholder.NewIdentity("reports").Value(tok, time.Now().Add(-time.Minute)), time.Hour).Err())
	must(rdb.ConfigSet(ctx, "requirepass", "s3cret-pw").Err())

	t.Setenv(PasswordEnv, "s3cret-pw")
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"locks", "--redis.url", "redis://" + srv.Addr, "--format", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var l locks.Listing
	must(json.Unmarshal(out.Bytes(), &l))
	if len(l.Locks) != 1 || l.Locks[0].Key != "lock:report:nightly" || l.Locks[0].Service != "reports" || l.Locks[0].HeldFor < 59 {
		t.Fatalf("listing %+v", l)
	}
	out.Reset()
	if code := run(ctx, []string{"locks", "--redis.url", "redis://" + srv.Addr}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "lock:report:nightly") || !strings.Contains(out.String(), "reports") {
		t.Fatalf("table: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, bad := range [][]string{{"--refresh", "0s"}, {"--limit", "-1"}, {"--scan-rate", "0"}, {"--redis.password", "x"}} {
		errOut.Reset()
		args := append([]string{"locks", "--redis.url", "redis://" + srv.Addr}, bad...)
		if code := run(ctx, args, &out, &errOut); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", bad, code, exitUsage)
		}
	}
	t.Setenv(PasswordEnv, "wrong")
	errOut.Reset()
	if code := run(ctx, []string{"locks", "--redis.url", "redis://" + srv.Addr}, &out, &errOut); code != exitIncomplete ||
		strings.Contains(errOut.String(), "wrong") {
		t.Fatalf("wrong password: exit %d, stderr %q", code, errOut.String())
	}
}
