// Package locktest holds what lock tests share: go-redis hooks that count
// acquire attempts on the wire or hold them until their caller's context
// ends, and a critical section that detects two holders inside it at once.
package locktest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// SetNXCounter is a go-redis hook counting the lock acquire attempts a
// client sends, as seen on the wire: SET … NX commands and cachewatch's
// acquire scripts.
type SetNXCounter struct{ n atomic.Int64 }

// N returns the SET … NX commands counted so far.
func (h *SetNXCounter) N() int64 { return h.n.Load() }

// DialHook passes dials through.
func (h *SetNXCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes pipelines through uncounted (lock libraries
// acquire with single commands).
func (h *SetNXCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook counts SET commands whose last argument is NX, and acquire
// scripts Redis ran.
func (h *SetNXCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "set" && len(args) > 3 && strings.EqualFold(fmt.Sprint(args[len(args)-1]), "nx") {
			h.n.Add(1)
		}
		err := next(ctx, cmd)
		if IsAcquireScript(cmd) && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) {
			h.n.Add(1) // an EVALSHA refused for an unloaded script is sent again as EVAL
		}
		return err
	}
}

// HoldAttempts is a go-redis hook that holds every lock acquire attempt (a
// SET, or cachewatch's fencing acquire script) whose context can end until
// it ends, then passes it on, and go-redis, given a context that has ended,
// does not send it: an attempt in flight when the caller's deadline passes
// or it cancels, on any machine. Attempts under a context that cannot end
// pass at once. Each attempt held is announced on Entered when it has room
// (nil: not announced).
type HoldAttempts struct {
	Entered chan struct{}
}

// DialHook passes dials through.
func (h *HoldAttempts) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes pipelines through.
func (h *HoldAttempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook holds acquire attempts until their context ends.
func (h *HoldAttempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch name := strings.ToLower(cmd.Name()); {
		case ctx.Done() == nil:
		case name == "set", IsAcquireScript(cmd):
			select {
			case h.Entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
		}
		return next(ctx, cmd)
	}
}

// IsAcquireScript reports whether cmd runs one of cachewatch's lock
// acquire scripts.
func IsAcquireScript(cmd redis.Cmder) bool {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); (name != "evalsha" && name != "eval") || len(args) < 2 {
		return false
	}
	for _, s := range []*luascript.Script{luascript.LockAcquire, luascript.LockAcquireFenced} {
		if args[1] == s.SHA || args[1] == s.Src {
			return true
		}
	}
	return false
}

// CheckCutOff asserts that g counts n acquisitions given up and nothing
// else of acquisitions whose attempts were all cut off by their callers'
// contexts (HoldAttempts): no outcome="error", no attempt (none got a
// result from Redis).
func CheckCutOff(t testing.TB, g prometheus.Gatherer, n int) {
	t.Helper()
	if got := metrictest.Sum(t, g, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up"); got != float64(n) {
		t.Errorf("acquire{outcome=gave_up} = %v, want %d", got, n)
	}
	if got := metrictest.Sum(t, g, "cachewatch_lock_acquire_duration_seconds", "outcome", "error"); got != 0 {
		t.Errorf("acquire{outcome=error} = %v, want 0: the callers' contexts ended, Redis did not fail", got)
	}
	if got := metrictest.Sum(t, g, "cachewatch_lock_attempts_total"); got != 0 {
		t.Errorf("attempts = %v, want 0: no attempt got a result", got)
	}
}

// Section is a critical section that counts entries and overlaps: an entry
// that finds another holder inside is a broken lock.
type Section struct {
	inside, overlaps, entered atomic.Int64
}

// Hold enters the section, stays for d and leaves.
func (s *Section) Hold(d time.Duration) {
	if s.inside.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	s.entered.Add(1)
	time.Sleep(d)
	s.inside.Add(-1)
}

// Overlaps returns the entries that found another holder inside.
func (s *Section) Overlaps() int64 { return s.overlaps.Load() }

// Entered returns the entries so far.
func (s *Section) Entered() int64 { return s.entered.Load() }
