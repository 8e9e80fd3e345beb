package doctor_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Doctor names the holder of every lock it flags: a lock without TTL of
// the reports service, a bare token (opaque), and a lock its holder keeps
// extending past the TTL it first had (long-held). The first is a live
// lock whose holder's liveness key is gone: "(process gone)".
func TestDoctorNamesHolders(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	tok, err := lockholder.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"lock:stuck:1":   lockholder.NewIdentity("reports").LiveValue(tok, time.Now()),
		"lock:stuck:2":   "bare-token",
		"lock:renewed:1": lockholder.NewIdentity("billing").Value(tok+"x", time.Now()),
	} {
		ttl := time.Duration(0)
		if strings.HasPrefix(k, "lock:renewed:") {
			ttl = 2 * time.Second
		}
		if err := rdb.Set(ctx, k, v, ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The holder of lock:renewed:1 keeps its lease 2 s long while doctor
	// runs: held longer than that, it is long-held.
	stop, wg := make(chan struct{}), sync.WaitGroup{}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				_ = rdb.PExpire(ctx, "lock:renewed:1", 2*time.Second).Err()
			}
		}
	})
	r, err := doctor.Run(ctx, doctor.Options{Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}},
		Interval: 3 * time.Second})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	named := map[string]string{}
	for _, f := range r.Findings {
		for _, l := range f.Locks {
			named[f.Check+" "+l.Key] = l.Format + " " + l.Service + " " + l.Host + " " + strconv.Itoa(l.PID) + " " + l.Alive
		}
	}
	pid := strconv.Itoa(os.Getpid())
	want := map[string]string{
		doctor.CheckLocksWithoutTTL + " lock:stuck:1": "cachewatch reports " + host + " " + pid + " no",
		doctor.CheckLocksWithoutTTL + " lock:stuck:2": "opaque   0 unknown",
		doctor.CheckLongHeldLocks + " lock:renewed:1": "cachewatch billing " + host + " " + pid + " unknown",
	}
	for k, v := range want {
		if named[k] != v {
			t.Errorf("%s: named %q, want %q", k, named[k], v)
		}
	}
	if len(named) != len(want) {
		t.Errorf("named %v, want %v", named, want)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"lock:stuck:1  held by reports@" + host + " pid " + pid + " (process gone)", "lock:stuck:2  held by opaque"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, text.String())
		}
	}
}
