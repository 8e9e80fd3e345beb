package locks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/locks"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The alive? column: yes for a live lock whose holder's liveness key
// exists, no when it is gone, unknown for a holder that keeps none (an
// unmarked value, another library's token), in the table and in JSON; on
// one server and on a Cluster, where the liveness keys are on other
// masters than the locks.
func TestListingAlive(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		testListingAlive(t, srv.Client(t), newReader(t, srv.Addr, clockwork.NewRealClock()))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		r, err := locks.New(locks.Options{Target: exporter.Target{Addrs: cl.Addrs()[:1]}})
		must(t, err)
		testListingAlive(t, cl.Client(t), r)
	})
}

func testListingAlive(t *testing.T, rdb redis.UniversalClient, r *locks.Reader) {
	ctx := context.Background()
	now := time.Now().UnixMilli()
	value := func(instance, mark string) string {
		return fmt.Sprintf("cw1|tok%s|reports|host-1|42|%s|%d%s", instance, instance, now, mark)
	}
	want := map[string]string{}
	for i := range 12 { // instances spread over the masters
		live, dead := fmt.Sprintf("liveInst%d", i), fmt.Sprintf("deadInst%d", i)
		must(t, rdb.Set(ctx, lockholder.AliveKey(live), "1", time.Minute).Err())
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:live:%d", i), value(live, "@"), time.Minute).Err())
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:dead:%d", i), value(dead, "@"), time.Minute).Err())
		want[fmt.Sprintf("lock:live:%d", i)], want[fmt.Sprintf("lock:dead:%d", i)] = "yes", "no"
	}
	must(t, rdb.Set(ctx, "lock:unmarked:1", value("deadInstU", ""), time.Minute).Err())
	must(t, rdb.Set(ctx, "lock:opaque:1", "abcdefghijklmnopqrstuv", time.Minute).Err())
	want["lock:unmarked:1"], want["lock:opaque:1"] = "unknown", "unknown"
	l, err := r.Read(ctx)
	must(t, err)
	if len(l.Locks) != len(want) {
		t.Fatalf("%d locks listed, want %d", len(l.Locks), len(want))
	}
	for _, lk := range l.Locks {
		if lk.Alive != want[lk.Key] {
			t.Errorf("%s: alive %q, want %q", lk.Key, lk.Alive, want[lk.Key])
		}
	}
	var table, js bytes.Buffer
	must(t, l.WriteTable(&table, 0))
	must(t, l.WriteJSON(&js))
	if !strings.Contains(table.String(), "ALIVE?") {
		t.Errorf("table without the alive? column:\n%s", table.String())
	}
	var doc struct {
		Locks []struct {
			Key   string `json:"key"`
			Alive string `json:"alive"`
		} `json:"locks"`
	}
	must(t, json.Unmarshal(js.Bytes(), &doc))
	for _, lk := range doc.Locks {
		if lk.Alive != want[lk.Key] {
			t.Errorf("JSON %s: alive %q, want %q", lk.Key, lk.Alive, want[lk.Key])
		}
	}
}
