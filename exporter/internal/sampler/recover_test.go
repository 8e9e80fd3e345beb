package sampler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// panicOnScan panics in the reading of the SCAN replies of one pass: the
// lock pass's (SCAN … MATCH) or the whole-keyspace pass's.
type panicOnScan struct{ lockPass bool }

func (p panicOnScan) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p panicOnScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p panicOnScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "scan" && (len(args) > 2 && args[2] == "match") == p.lockPass {
			panic("a reply broke its reader")
		}
		return next(ctx, cmd)
	}
}

// A read that panics, in either pass, takes down neither the process nor
// the sampler: the node reports down (class malformed, ErrBadReply; stage
// locks for the lock pass's goroutine, connect for the node's) until
// its backoff passes, and it is sampled again then; a panic on the node's
// goroutine starts its connections afresh.
func TestPanickedSampleDownsTheNode(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client(t).Set(ctx, "lock:1", "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for name, stage := range map[string]Stage{"lock pass": StageLocks, "keyspace pass": StageConnect} {
		t.Run(name, func(t *testing.T) {
			fc := clockwork.NewFakeClockAt(time.Now())
			cfg := testConfig(t, srv.Addr)
			cfg.Clock, cfg.Notify, cfg.Unpaced = fc, NotifyOff, true
			s := newTestSampler(t, cfg)
			s.refreshNodes(ctx)[0].env.rdb.AddHook(panicOnScan{lockPass: stage == StageLocks})
			down := s.Sample(ctx)[0]
			if down.Up || !errors.Is(down.Err, ErrBadReply) || down.ErrorCounts[errorKey(stage, ClassMalformed)] != 1 {
				t.Fatalf("after a panic: up=%v err=%v counts=%v", down.Up, down.Err, down.ErrorCounts)
			}
			if again := s.Sample(ctx)[0]; again != down {
				t.Fatalf("sampled again within the backoff: %+v", again)
			}
			fc.Advance(time.Second)
			after := s.Sample(ctx)[0]
			if stage == StageLocks { // the hook stays on the client: it panics again
				if after.Up || after.ErrorCounts[errorKey(stage, ClassMalformed)] != 2 {
					t.Fatalf("after the backoff: up=%v counts=%v", after.Up, after.ErrorCounts)
				}
				return
			}
			// The client was replaced, without the hook.
			if !after.Up || after.Pass == nil || after.Pass.Groups["lock:*"] == nil || after.Pass.Groups["lock:*"].Locks != 1 {
				t.Fatalf("after the backoff: up=%v err=%v pass=%+v", after.Up, after.Err, after.Pass)
			}
		})
	}
}
