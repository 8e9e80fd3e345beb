package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

// upstream is a slow origin that counts its calls and can be made to fail.
type upstream struct {
	calls   atomic.Int64
	failing atomic.Bool
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.calls.Add(1)
	time.Sleep(100 * time.Millisecond) // a slow query
	if u.failing.Load() {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "v%d", u.calls.Load())
}

type fleet struct {
	origin    *upstream
	instances []*httptest.Server
	reg       *prometheus.Registry
	redis     *redistest.Server
}

// newFleet runs n instances of the service, each with its own go-redis
// client and cache, on one real Redis.
func newFleet(t *testing.T, n int, fresh time.Duration) *fleet {
	t.Helper()
	f := &fleet{origin: &upstream{}, reg: prometheus.NewRegistry(), redis: redistest.Start(t)}
	origin := httptest.NewServer(f.origin)
	t.Cleanup(origin.Close)
	for i := range n {
		svc, err := New(Config{Redis: f.redis.Client(t), Upstream: origin.URL, FreshTTL: fresh, HardTTL: time.Hour,
			Registerer: f.reg, Name: fmt.Sprintf("instance-%d", i),
			// A loaded CI machine can stall a round trip past the default
			// 250ms, which degrades a request to a direct upstream call.
			RedisTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Close() })
		ts := httptest.NewServer(svc)
		t.Cleanup(ts.Close)
		f.instances = append(f.instances, ts)
	}
	return f
}

// crowd sends perInstance concurrent GETs of path to every instance and
// returns the bodies' status codes.
func (f *fleet) crowd(t *testing.T, path string, perInstance int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for _, inst := range f.instances {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Get(inst.URL + path)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return codes
}

func (f *fleet) lookups(t *testing.T, result string) float64 {
	return metrictest.Sum(t, f.reg, signals.CacheLookups.String(), "result", result)
}

// A cold key requested by 3 instances × 20 callers at once reaches the
// upstream once; the metrics count one miss and 59 coalesced callers.
func TestOneUpstreamCallAcrossInstances(t *testing.T) {
	f := newFleet(t, 3, time.Minute)
	codes := f.crowd(t, "/page/prices", 20)
	if codes[http.StatusOK] != 60 {
		t.Fatalf("status codes %v, want 60 × 200", codes)
	}
	if got := f.origin.calls.Load(); got != 1 {
		t.Fatalf("upstream called %d times for one cold key, want 1 (fallback lookups: %v)", got, f.lookups(t, "fallback"))
	}
	if src := metrictest.Sum(t, f.reg, signals.LoaderCalls.String(), "result", "success"); src != 1 {
		t.Errorf("loader_calls{success} = %v, want 1", src)
	}
	if served := f.lookups(t, "miss") + f.lookups(t, "coalesced") + f.lookups(t, "hit"); served != 60 {
		t.Errorf("lookups miss+coalesced+hit = %v, want 60", served)
	}
}

// When the upstream fails on a stale key, callers keep getting the stale
// value (never an error) and the refresh failure is counted.
func TestStaleServedWhileUpstreamFails(t *testing.T) {
	f := newFleet(t, 2, 200*time.Millisecond)
	if codes := f.crowd(t, "/page/home", 1); codes[http.StatusOK] != 2 {
		t.Fatalf("warm-up: %v", codes)
	}
	f.origin.failing.Store(true)
	time.Sleep(300 * time.Millisecond) // past FreshTTL: the value is stale now (longer on a loaded machine is fine)
	if codes := f.crowd(t, "/page/home", 10); codes[http.StatusOK] != 20 {
		t.Fatalf("with the upstream failing on a stale key: %v, want 20 × 200", codes)
	}
	if stale := f.lookups(t, "stale"); stale == 0 {
		t.Error("no stale lookups counted while serving stale")
	}
	poll.Until(t, "the failed background refresh to be counted", func() bool {
		return metrictest.Sum(t, f.reg, signals.LoaderRefreshFailures.String()) >= 1
	})
}

// With Redis down the handler still answers, from the upstream directly,
// and says so in the fallback lookups.
func TestDegradedModeWhenRedisIsDown(t *testing.T) {
	f := newFleet(t, 1, time.Minute)
	f.redis.Kill()
	if codes := f.crowd(t, "/page/down", 5); codes[http.StatusOK] != 5 {
		t.Fatalf("with Redis down: %v, want 5 × 200", codes)
	}
	if fb := f.lookups(t, "fallback"); fb != 5 {
		t.Errorf("lookups{fallback} = %v, want 5", fb)
	}
	if calls := f.origin.calls.Load(); calls < 1 || calls > 5 {
		t.Errorf("upstream calls = %d, want 1..5", calls)
	}
}

// Without --upstream the service runs against a stand-in: a page comes back
// from it, and 20 concurrent requests for a cold page make one call.
func TestStandInUpstream(t *testing.T) {
	up, err := standIn()
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	svc, err := New(Config{Redis: srv.Client(t), Upstream: up, FreshTTL: time.Minute, HardTTL: time.Hour, Registerer: reg,
		Name: "standin", RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ts := httptest.NewServer(svc)
	defer ts.Close()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := http.Get(ts.URL + "/page/prices")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"body":"page/prices as of`) {
				t.Errorf("GET /page/prices: %d %s", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	if n := metrictest.Sum(t, reg, signals.LoaderCalls.String()); n != 1 {
		t.Errorf("the stand-in was called %v times for 20 requests of a cold page, want 1", n)
	}
}
