// Package poll waits, in tests, for a condition that another goroutine or
// process brings about and that offers nothing to wait on (a counter read
// back from a registry, a key in Redis, a server's state): it checks often
// and gives up only after a bound generous enough for a busy shared
// machine. The bound is a liveness bound, never a speed assertion.
//
// Goroutines of the test itself are ordered by channels or hooks, not by
// polling: poll is for what the test can only observe.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Bound is how long Until waits before it fails the test.
const Bound = 30 * time.Second

// every is how often Until checks.
const every = 2 * time.Millisecond

// errNotYet is Until's check's answer while its condition does not hold.
var errNotYet = errors.New("condition not met")

// Until calls cond until it reports true, failing t with what (the awaited
// condition, as in "the renewal to be counted") if it has not within Bound.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := Check(context.Background(), Bound, every, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("gave up waiting for %s: %v", what, err)
	}
}

// Check calls check every interval until it returns nil, and returns nil
// then; once within has passed, or when ctx ends, it returns the last
// error check gave (or ctx's).
func Check(ctx context.Context, within, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("still failing after %v: %w", within, err)
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %w)", ctx.Err(), err)
		case <-timer.C:
		}
	}
}
