package sampler

import (
	"errors"
	"testing"
)

// A cursor returned twice in one pass is a loop; so is a pass that makes
// more calls than its budget, each with a new cursor. A new pass (or
// pattern) starts afresh, and cursor 0 ends a pass without counting.
func TestScanWatch(t *testing.T) {
	var w scanWatch
	w.start()
	for _, c := range []uint64{12, 7, 19} {
		if err := w.next(c, 0); err != nil {
			t.Fatalf("cursor %d: %v", c, err)
		}
	}
	if err := w.next(7, 0); !errors.Is(err, ErrScanLoop) || !errors.Is(err, ErrBadReply) {
		t.Fatalf("cursor 7 again: %v, want ErrScanLoop", err)
	}
	w.start()
	if err := w.next(7, 0); err != nil {
		t.Fatalf("cursor 7 in a new pass: %v", err)
	}
	w.start()
	var err error
	for c := uint64(1); err == nil && c < 1000; c++ {
		err = w.next(c, 100)
	}
	if !errors.Is(err, ErrScanLoop) || w.calls != 101 {
		t.Fatalf("after %d calls with a budget of 100: %v", w.calls, err)
	}
}

// The budget is four times the calls a node's keys need, and a thousand
// more; none when the number of keys is unknown.
func TestScanBudget(t *testing.T) {
	if b := (&facts{}).scanBudget(25); b != 0 {
		t.Fatalf("unknown keyspace: budget %d", b)
	}
	if b := (&facts{dbKnown: true, dbKeys: 1_000_000}).scanBudget(25); b != 4*40_001+1000 {
		t.Fatalf("1,000,000 keys, COUNT 25: budget %d", b)
	}
}
