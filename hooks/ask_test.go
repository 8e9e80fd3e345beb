package hooks_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// TestAskErrors puts a slot in migration on a real Cluster, as resharding
// does, and reads a missing key of that slot from its old owner with a plain
// client: the server answers ASK, which the hook classifies as "ask".
func TestAskErrors(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	src := redistest.NewClient(t, quiet(&redis.Options{Addr: cluster.Nodes[0].Addr, MaxRetries: -1}))
	dst := redistest.NewClient(t, quiet(&redis.Options{Addr: cluster.Nodes[1].Addr, MaxRetries: -1}))
	// Slot 0 belongs to the first node (redistest splits slots in order).
	const key = "user:{3560}" // CLUSTER KEYSLOT → 0
	if slot, err := src.ClusterKeySlot(ctx, key).Result(); err != nil || slot != 0 {
		t.Fatalf("keyslot(%s) = %d, %v; want 0", key, slot, err)
	}
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", 0, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", 0, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}

	reg := hookOn(t, src, hooks.Options{})
	const n = 5
	for i := 0; i < n; i++ {
		err := src.Get(ctx, key).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
			t.Fatalf("GET of a migrating slot's missing key = %v, want an ASK redirection", err)
		}
	}
	expect(t, reg, cmdErrs, map[string]float64{"command=get,error_class=ask": n, "": n})
}
