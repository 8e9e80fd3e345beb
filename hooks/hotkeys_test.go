package hooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/hooks"
)

func TestHotKeys(t *testing.T) {
	h, reg := newHook(t, hooks.Options{HotKeys: 4})
	rdb := hookedClient(t, h)
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		rdb.Get(ctx, "product:42") // the hot key
		rdb.Get(ctx, fmt.Sprintf("product:%d", 1000+i%50))
	}
	rdb.SetNX(ctx, "lock:product:42", "a", time.Minute)
	for i := 0; i < 30; i++ {
		rdb.SetNX(ctx, "lock:product:42", fmt.Sprint("b", i), time.Minute)
	}
	rr := httptest.NewRecorder()
	h.HotKeysHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/debug/hotkeys", nil))
	var view []hooks.HotGroup
	if err := json.Unmarshal(rr.Body.Bytes(), &view); err != nil {
		t.Fatalf("%v: %s", err, rr.Body)
	}
	byGroup := map[string]hooks.HotGroup{}
	for _, g := range view {
		byGroup[g.Group] = g
	}
	req := byGroup["product:*"].Requested
	if len(req) == 0 || len(req) > 4 || req[0].Key != "product:42" || req[0].Count-req[0].Err > 200 || req[0].Count < 200 {
		t.Errorf("requested product:* = %+v", req)
	}
	con := byGroup["lock:product:*"].Contended
	if len(con) != 1 || con[0] != (hooks.HotKey{Key: "lock:product:42", Count: 30}) {
		t.Errorf("contended lock:product:* = %+v", con)
	}
	// Keys stay out of the metrics.
	for _, v := range labelValues(t, reg, lookups, "key_group") {
		if v == "product:42" {
			t.Error("a raw key became a label")
		}
	}
}
