package instrument

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sony/gobreaker/v2"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Two open Caches never share a breaker series: a second Cache under the
// name of an open one (both defaulted, or two Clients with the default
// Name on one registry) is refused at construction, so it cannot reset
// the first's "open" to "closed". Distinct names give distinct series.
func TestCacheNamesCannotCollide(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	newClient := func(name string) *Client {
		c, err := New(srv.Client(t), Options{Registerer: reg, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := mustCache[string](t, newClient(""), CacheOptions{BreakerFailures: 1, BreakerHalfOpenAfter: time.Hour, RedisTimeout: 50 * time.Millisecond})
	state := func(client string) float64 {
		return testutil.ToFloat64(first.c.m.breakerState.WithLabelValues(client))
	}
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := first.Fetch(ctx, "k:1", func(context.Context) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	srv.Resume()
	if got := state("default"); got != float64(gobreaker.StateOpen) {
		t.Fatalf("breaker state = %v after a failure with BreakerFailures 1, want open (2)", got)
	}
	for what, make := range map[string]func() (*Cache[string], error){
		"second Cache of the Client":      func() (*Cache[string], error) { return NewCache[string](first.c, CacheOptions{}) },
		"Cache of another default Client": func() (*Cache[string], error) { return NewCache[string](newClient(""), CacheOptions{}) },
		"Cache named like the first": func() (*Cache[string], error) {
			return NewCache[string](newClient("other"), CacheOptions{Name: "default"})
		},
	} {
		if ca, err := make(); !errors.Is(err, ErrNameTaken) {
			if ca != nil {
				_ = ca.Close()
			}
			t.Errorf("%s: NewCache error = %v, want ErrNameTaken", what, err)
		}
	}
	if got := state("default"); got != float64(gobreaker.StateOpen) {
		t.Fatalf("breaker state of the first Cache = %v after the refused constructions, want still open (2)", got)
	}
	second := mustCache[string](t, first.c, CacheOptions{Name: "reports"})
	if got, open := testutil.ToFloat64(second.c.m.breakerState.WithLabelValues("reports")), state("default"); got != 0 || open != 2 {
		t.Fatalf("distinct names: breaker states reports=%v default=%v, want 0 and 2", got, open)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := NewCache[string](newClient(""), CacheOptions{})
	if err != nil {
		t.Fatalf("NewCache after the first Cache closed: %v; its name should be free again", err)
	}
	_ = again.Close()
}

// A client's lock and cache series carry its Name, so two clients (two
// services in one process, or a client and its hook under the same Name)
// are told apart — or lined up — by the client label.
func TestClientNameLabelsLockAndCacheSeries(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	for name, fetches := range map[string]int{"checkout": 2, "search": 1} {
		c, err := New(srv.Client(t), Options{Registerer: reg, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ca := mustCache[string](t, c, CacheOptions{FreshTTL: time.Minute})
		for i := range fetches {
			if _, err := ca.Fetch(ctx, fmt.Sprintf("%s:%d", name, i), func(context.Context) (string, error) { return "v", nil }); err != nil {
				t.Fatal(err)
			}
		}
		l, err := c.Lock(ctx, "lock:"+name, LockOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, client string
		want         float64
	}{
		{"cachewatch_cache_lookups_total", "checkout", 2},
		{"cachewatch_cache_lookups_total", "search", 1},
		{"cachewatch_loader_calls_total", "checkout", 2},
		{"cachewatch_loader_calls_total", "search", 1},
		{"cachewatch_lock_attempts_total", "checkout", 1},
		{"cachewatch_lock_attempts_total", "search", 1},
	} {
		if got := metrictest.Sum(t, reg, c.name, "client", c.client); got != c.want {
			t.Errorf("%s{client=%q} = %v, want %v", c.name, c.client, got, c.want)
		}
	}
}
