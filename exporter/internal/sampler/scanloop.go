package sampler

import (
	"fmt"
	"strconv"
)

// ErrScanLoop marks a SCAN that does not iterate: its cursor came back to
// one it had already returned in the same pass, or the pass made far more
// calls than the node's keys need. A server (or proxy) that loops is not
// trusted: the node is down (class "malformed") until its backoff passes,
// instead of counting the same keys again and again. It wraps ErrBadReply.
var ErrScanLoop = fmt.Errorf("%w: SCAN does not complete", ErrBadReply)

// maxWatchedCursors bounds the cursors remembered per pass; past it, only
// the pass's budget of calls is checked.
const maxWatchedCursors = 1 << 14

// scanWatch follows the cursors of one SCAN pass (of one pattern).
type scanWatch struct {
	seen  map[uint64]struct{}
	calls uint64
}

// start begins a pass.
func (w *scanWatch) start() { w.seen, w.calls = nil, 0 }

// next records the cursor a SCAN call returned, and fails when it was
// already returned in this pass or the pass has made more calls than
// budget (0: no budget).
func (w *scanWatch) next(cursor, budget uint64) error {
	w.calls++
	if budget > 0 && w.calls > budget {
		return fmt.Errorf("%w: %d calls in one pass, more than a pass over the node's keys needs (%d)", ErrScanLoop, w.calls, budget)
	}
	if cursor == 0 {
		return nil
	}
	if _, again := w.seen[cursor]; again {
		return fmt.Errorf("%w: cursor %s returned twice in one pass", ErrScanLoop, strconv.FormatUint(cursor, 10))
	}
	if w.seen == nil {
		w.seen = map[uint64]struct{}{}
	}
	if len(w.seen) < maxWatchedCursors {
		w.seen[cursor] = struct{}{}
	}
	return nil
}
