package instrument_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cachewatch/cachewatch/instrument"
)

// What Lock and NewCache return with an error is safe to defer-release: a
// nil *Lock and a nil *Cache never panic.
func TestNilLockAndCacheAreSafe(t *testing.T) {
	var l *instrument.Lock
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("nil Lock.Release = %v, want nil", err)
	}
	if err := l.Extend(context.Background(), 0); !errors.Is(err, instrument.ErrNotOwner) {
		t.Errorf("nil Lock.Extend = %v, want ErrNotOwner", err)
	}
	if l.Context().Err() == nil {
		t.Error("nil Lock.Context is not done: guarded work would run without the lock")
	}
	if l.TTL() != 0 || l.Fence() != 0 || l.Key() != "" || l.Token() != "" {
		t.Error("nil Lock accessors return non-zero values")
	}
	var c *instrument.Cache[string]
	if err := c.Close(); err != nil {
		t.Errorf("nil Cache.Close = %v, want nil", err)
	}
}
