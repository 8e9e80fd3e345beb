package hooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/poll"
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
	rdb, reg := hooked(t, hooks.Options{})
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

// Every owner-checked release or renewal that ends a lease is counted by
// what its reply shows: released (1), refused (0: gone or someone else's,
// which a redislock release cannot tell apart), expired (redsync's -1 for
// a gone lock), lost (a renewal answered 0). A successful renewal ends
// nothing.
func TestLeaseEndsSayWhatTheReplyTells(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{})
	ctx := context.Background()
	release, refresh := lockScript(t, "redislock_release"), lockScript(t, "redislock_refresh")
	redsync := lockScript(t, "redsync_release")
	run := func(s *redis.Script, key string, want int64, args ...any) {
		t.Helper()
		if n, err := s.Run(ctx, rdb, []string{key}, args...).Int64(); err != nil || n != want {
			t.Fatalf("script on %s = %v, %v; want %d", key, n, err, want)
		}
	}
	take := func(key, token string, ttl time.Duration) {
		t.Helper()
		if ok, err := rdb.SetNX(ctx, key, token, ttl).Result(); err != nil || !ok {
			t.Fatalf("SET NX %s = %v, %v", key, ok, err)
		}
	}
	// Released by its holder, after one renewal.
	take("lock:a:1", "me", time.Minute)
	run(refresh, "lock:a:1", 1, "me", 60000)
	run(release, "lock:a:1", 1, "me")
	// Released after it expired: Redis removed it (PX 1), refused.
	take("lock:a:2", "me", time.Millisecond)
	poll.Until(t, "the lock to expire", func() bool { return rdb.Exists(ctx, "lock:a:2").Val() == 0 })
	run(release, "lock:a:2", 0, "me")
	// Someone else's: refused; renewing it: lost.
	take("lock:a:3", "other", time.Minute)
	run(release, "lock:a:3", 0, "me")
	run(refresh, "lock:a:3", 0, "me", 60000)
	// redsync tells a gone lock (-1) from another owner's (0).
	run(redsync, "lock:b:1", -1, "me")
	take("lock:b:2", "other", time.Minute)
	run(redsync, "lock:b:2", 0, "me")

	expect(t, reg, "cachewatch_lock_lease_ends_total", map[string]float64{
		"key_group=lock:a:*,outcome=released": 1,
		"key_group=lock:a:*,outcome=refused":  2,
		"key_group=lock:a:*,outcome=lost":     1,
		"key_group=lock:a:*,outcome=expired":  0,
		"key_group=lock:b:*,outcome=expired":  1,
		"key_group=lock:b:*,outcome=refused":  1,
		"":                                    6,
	})
}
