package instrument

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A refresh claim names its holder as a lock does, followed by its wake
// channel on a single server once it is subscribed.
func TestClaimNamesItsHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	clk := newFetchClock()
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), clk, CacheOptions{RefreshClaimTTL: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var claim string
	_, err := ca.Fetch(ctx, "item:1", func(ctx context.Context) (string, error) {
		var err error
		claim, err = rdb.Get(ctx, keysFor("item:1").claim).Result()
		return "v", err
	})
	if err != nil {
		t.Fatal(err)
	}
	h := lockholder.Parse(claim)
	host, _ := os.Hostname()
	if h.Kind != lockholder.Cachewatch || h.Service != "default" || h.Host != host || h.PID != os.Getpid() ||
		!h.Acquired.Equal(clk.now().Truncate(time.Millisecond)) || (h.Wake != "" && h.Wake != ca.c.hub.wake) {
		t.Fatalf("claim %q reads %+v; want this process's holder, acquired at %v, wake channel none or %q", claim, h, clk.now(), ca.c.hub.wake)
	}
}
