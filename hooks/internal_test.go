package hooks

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The lock libraries' scripts must match byte for byte, or EVALSHA of their
// SHAs would go unnamed. redsync publishes its SHAs next to the bodies; the
// bench module checks redislock's (and redsync's) against the real libraries.
func TestLockLibrarySHAs(t *testing.T) {
	want := map[string]string{
		redsyncDelete:         "e950836ed1e694540c503ef9972b8de518044d3b",
		redsyncTouchWithSetNX: "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79",
		redsyncTouch:          "d75bb8b5bd13532ddedd17762e772346e39b321e",
	}
	for src, sha := range want {
		if got := sha1Hex(src); got != sha {
			t.Errorf("sha1(%.30q...) = %s, want %s", src, got, sha)
		}
	}
}

func TestNewRejectsBadScripts(t *testing.T) {
	for _, s := range []Script{
		{Src: "return 1"},
		{Name: "x"},
		{Name: "x", SHA: "not-a-sha"},
		{Name: "x", Src: "return 1", Role: 9},
	} {
		if _, err := New(Options{Registerer: prometheus.NewRegistry(), Scripts: []Script{s}}); err == nil {
			t.Errorf("New accepted %+v", s)
		}
	}
}

func TestRetryTable(t *testing.T) {
	rt := newRetryTable()
	a, b := rt.hash(1, "tok-a"), rt.hash(1, "tok-b")
	if _, ok := rt.busySince(a); ok {
		t.Fatal("fresh attempt is a retry")
	}
	rt.busy(a, 1000)
	rt.busy(a, 2000) // a retry keeps the first attempt's time
	if since, ok := rt.busySince(a); !ok || since != 1000 {
		t.Fatalf("busySince = %d, %v; want 1000, true", since, ok)
	}
	if _, ok := rt.busySince(b); ok {
		t.Fatal("busy attempt remembered for another token")
	}
	rt.forget(rt.find(a), a)
	if _, ok := rt.busySince(a); ok {
		t.Fatal("acquired attempt still remembered")
	}
	// A full bucket evicts: memory stays bounded.
	for i := 0; i < 3*retrySlots; i++ {
		rt.busy(rt.hash(uint64(i), "tok"), 1)
	}
}

func TestSpaceSaving(t *testing.T) {
	s := newSpaceSaving(3)
	for i := 0; i < 100; i++ {
		s.add("hot")
		if i%2 == 0 {
			s.add("warm")
		}
		s.add(string(rune('a' + i%20))) // a long tail
	}
	top := s.top()
	if len(top) != 3 || top[0].Key != "hot" || top[0].Count-top[0].Err > 100 || top[0].Count < 100 {
		t.Fatalf("top = %+v", top)
	}
}
