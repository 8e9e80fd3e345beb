package sampler

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// panicked is the error of a sample, or a read, that panicked: a reply
// that got past the guard and still broke what read it. The node is down
// (class "malformed") until its backoff passes; the process, the other
// nodes and targets, and scrapes go on.
func panicked(r any) error {
	return fmt.Errorf("%w: reading it panicked: %v", ErrBadReply, r)
}

// sampleSafely is sample recovering from a panic: the node is reported
// down and its connections are started afresh (one may have been left
// mid-reply, out of the pool).
func (n *node) sampleSafely(ctx context.Context) (s *snapshot.Node) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		v := n.env
		v.cfg.Logger.Error("a sample panicked: the node is reported down and sampled again after its backoff",
			"node", v.addr, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		n.locks.stopFeed()
		_ = v.rdb.Close()
		v.rdb = v.cfg.client(v.addr)
		run := &sampleRun{ctx: ctx, n: n, s: &snapshot.Node{Node: v.addr}, began: v.cfg.Pacer.Now()}
		s = run.finish(&StageError{Stage: StageConnect, Class: ClassMalformed, Err: panicked(r)})
	}()
	return n.sample(ctx)
}

// recoverStage, deferred in a goroutine of a sample's stage, turns a panic
// into an error of the stage that makes the node down.
func recoverStage(stage Stage, errs *[]*StageError) {
	if r := recover(); r != nil {
		*errs = append(*errs, &StageError{Stage: stage, Class: ClassMalformed, Err: panicked(r)})
	}
}

// receiveSafely is ps.Receive returning a panic as an error.
func receiveSafely(ctx context.Context, ps *redis.PubSub) (msg any, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, panicked(r)
		}
	}()
	return ps.Receive(ctx)
}
