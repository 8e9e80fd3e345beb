package sampler

import (
	"strings"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// publishEarly shows scrapes the server figures of the sample at once,
// beside the last passes' figures: the passes may take most of the interval
// (they are paced). The lock stage publishes through what it returns as
// soon as it shows fresh lock figures.
func (r *sampleRun) publishEarly() *earlyView {
	n := r.n
	early := *r.s
	early.Up, early.Time = true, n.env.now()
	if n.last != nil { // the duration of the last whole sample, not 0
		early.Duration = n.last.Duration
	}
	keys, coverage := n.keys.view()
	early.Coverage = coverage
	early.Pass = n.locks.view(keys, n.locks.ok)
	n.selfCounters(&early)
	n.ages(&early)
	n.board.publish(&early)
	return &earlyView{n: n, base: early, keys: keys}
}

// earlyView is the snapshot published early in a sample, published again
// whenever the lock stage shows new figures.
type earlyView struct {
	n    *node
	base snapshot.Node
	keys *snapshot.Pass
}

// locksShown publishes the early snapshot with the lock figures just shown.
// Only the lock stage's goroutine calls it.
func (v *earlyView) locksShown() {
	withNew := v.base
	withNew.Pass = v.n.locks.view(v.keys, true)
	v.n.locks.ages(&withNew, true)
	v.n.board.publish(&withNew)
}

// passes runs the lock stage and the whole-keyspace pass concurrently,
// within the sample's budget, and records their errors. It returns the
// first error that makes the node unusable.
func (r *sampleRun) passes(early *earlyView) *StageError {
	n := r.n
	locks, keys := &n.locks, &n.keys
	deadline := r.began.Add(n.env.cfg.MaxDuration)
	hot := n.env.cfg.HotKeys > 0 && r.s.Server != nil && containsLFU(r.s.Server.MaxmemoryPolicy)
	runLocks := !r.skip(&locks.retry)
	readTokens := runLocks && !r.skip(&locks.tokens)
	runKeys := !r.skip(&keys.scanRetry) && !r.skip(&keys.keysRetry)
	lockOwn, keyOwn := lookups{}, lookups{}
	var lockErrs, keyErrs []*StageError
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer recoverStage(StageLocks, &lockErrs)
		if runLocks {
			lockErrs = locks.run(r.ctx, deadline, readTokens, lockOwn, early)
		}
	}()
	defer func() { <-done }() // also when the keyspace pass panics: the node is left to one goroutine
	if runKeys {
		keyErrs = keys.run(r.ctx, r.began, deadline, hot, keyOwn)
	}
	<-done
	n.own.merge(lockOwn)
	n.own.merge(keyOwn)
	if fatal := r.passErrors(lockErrs, keyErrs); fatal != nil {
		return fatal
	}
	locks.settled(runLocks, readTokens, lockErrs)
	keys.settled(runKeys, keyErrs)
	return nil
}

// passErrors records the errors of both passes, each with the backoff of
// the stage it failed, and returns the first that makes the node unusable
// (not recorded: the node fails).
func (r *sampleRun) passErrors(lockErrs, keyErrs []*StageError) *StageError {
	var fatal *StageError
	for _, se := range lockErrs {
		if se.Fatal() {
			fatal = cmpOr(fatal, se)
			continue
		}
		r.failed(se, r.n.locks.backoffFor(se))
	}
	for _, se := range keyErrs {
		if se.Fatal() {
			fatal = cmpOr(fatal, se)
			continue
		}
		r.failed(se, r.n.keys.backoffFor(se))
	}
	return fatal
}

func cmpOr(a, b *StageError) *StageError {
	if a != nil {
		return a
	}
	return b
}

func containsLFU(policy string) bool { return strings.HasSuffix(policy, "lfu") }

// sub is a - b, at least 0.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
