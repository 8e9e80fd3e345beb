package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The program as the README shows it, run against a throwaway Redis: 20
// concurrent requests get the greeting from one call of the slow source,
// and /metrics shows the cache's and the hook's series.
func TestHello(t *testing.T) {
	srv := redistest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	t.Setenv("REDIS_ADDR", srv.Addr)
	t.Setenv("LISTEN", listen)
	go main() // serves until the test binary exits

	poll.Until(t, "the program to listen", func() bool {
		resp, err := http.Get("http://" + listen + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if body := get(t, "http://"+listen+"/hello"); body != "hello, world\n" {
				t.Errorf("GET /hello = %q", body)
			}
		})
	}
	wg.Wait()
	if n := metrictest.Sum(t, prometheus.DefaultGatherer, "cachewatch_loader_calls_total"); n != 1 {
		t.Errorf("the slow source was called %v times for 20 concurrent requests, want 1", n)
	}
	page := get(t, "http://"+listen+"/metrics")
	for _, want := range []string{`cachewatch_cache_lookups_total{client="hello"`, `cachewatch_redis_command_duration_seconds_count{client="hello"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
