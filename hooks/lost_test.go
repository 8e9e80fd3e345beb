package hooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
)

// lockScript returns the source of one of the lock libraries' scripts.
func lockScript(t *testing.T, name string) *redis.Script {
	t.Helper()
	for _, s := range hooks.LockLibraryScripts() {
		if s.Name == name {
			return redis.NewScript(s.Src)
		}
	}
	t.Fatalf("no lock library script %q", name)
	return nil
}

// The lost-lock reason says only what the release's reply tells. redsync's
// release answers -1 for a gone lock and 0 for another owner's; bsm/
// redislock's (like most hand-written ones) answers 0 for both, so its
// losses are expired_or_not_owner, never a guessed not_owner.
func TestLostLockReasonsSayWhatTheReplyTells(t *testing.T) {
	rdb, reg, _ := hooked(t, hooks.Options{})
	ctx := context.Background()
	redislock := lockScript(t, "redislock_release")
	redsync := lockScript(t, "redsync_release")
	release := func(s *redis.Script, key, token string, want int64) {
		t.Helper()
		if n, err := s.Run(ctx, rdb, []string{key}, token).Int64(); err != nil || n != want {
			t.Fatalf("release of %s by %q = %v, %v; want %d", key, token, n, err, want)
		}
	}

	// Expired: the key is gone.
	release(redislock, "lock:a:1", "me", 0)
	release(redsync, "lock:b:1", "me", -1)
	// Another owner holds it.
	rdb.Set(ctx, "lock:a:2", "other", time.Minute)
	rdb.Set(ctx, "lock:b:2", "other", time.Minute)
	release(redislock, "lock:a:2", "me", 0)
	release(redsync, "lock:b:2", "me", 0)

	expect(t, reg, lost, map[string]float64{
		"key_group=lock:a:*,reason=expired_or_not_owner": 2,
		"key_group=lock:a:*,reason=not_owner":            0,
		"key_group=lock:a:*,reason=expired":              0,
		"key_group=lock:b:*,reason=expired":              1,
		"key_group=lock:b:*,reason=not_owner":            1,
		"key_group=lock:b:*,reason=expired_or_not_owner": 0,
		"": 4,
	})
}
