// Package locktest holds what lock tests share: a go-redis hook that counts
// acquire attempts on the wire, and a critical section that detects two
// holders inside it at once.
package locktest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// SetNXCounter is a go-redis hook counting the SET … NX commands (lock
// acquire attempts) a client sends, as seen on the wire.
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

// ProcessHook counts SET commands whose last argument is NX.
func (h *SetNXCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "set" && len(args) > 3 && strings.EqualFold(fmt.Sprint(args[len(args)-1]), "nx") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
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
