package sampler

import (
	"maps"
	"testing"
)

// Keys whose read timed out go back to the feed as changed: the next take
// returns them, but a later event of theirs (in a window closed since) wins,
// and more keys than the feed holds overflow it (a resync).
func TestFeedReadAgain(t *testing.T) {
	f := &lockFeed{max: 3, open: map[string]bool{}, closed: map[string]bool{}}
	f.event("lock:a", false)
	f.event("lock:b", false)
	f.pong("1")
	taken, _ := f.take()
	f.event("lock:b", true) // deleted after the take
	f.pong("2")
	f.readAgain([]string{"lock:a", "lock:b"})
	got, overflow := f.take()
	if want := map[string]bool{"lock:a": false, "lock:b": true}; overflow || !maps.Equal(got, want) || len(taken) != 2 {
		t.Fatalf("after readAgain: %v (overflow %v), want %v", got, overflow, want)
	}
	f.readAgain([]string{"lock:a", "lock:b", "lock:c", "lock:d"})
	if got, overflow := f.take(); !overflow || got != nil {
		t.Fatalf("more keys than the feed holds: %v (overflow %v), want an overflow", got, overflow)
	}
}
