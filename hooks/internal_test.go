package hooks

import (
	"testing"
	"time"

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
	settled := map[int]int{}
	rt := newRetryTable(time.Second, func(g int) { settled[g]++ })
	a, b := rt.hash(1, "tok-a"), rt.hash(1, "tok-b")
	if i, _ := rt.find(a); i >= 0 {
		t.Fatal("fresh attempt is a retry")
	}
	rt.add(entry{h: a, keyHash: 1, group: 7, nowUs: 1000, nowMs: 1})
	i, v := rt.find(a)
	if i < 0 || rt.firstSentUs(i) != 1000 {
		t.Fatalf("find after add: slot %d, first sent %d; want the entry sent at 1000µs", i, rt.firstSentUs(i))
	}
	if first, ok := rt.retried(i, v, 2); !first || !ok {
		t.Fatalf("first retry: first %v, ok %v", first, ok)
	}
	_, v = rt.find(a)
	if first, ok := rt.retried(i, v, 3); first || !ok {
		t.Fatalf("second retry: first %v, ok %v; want the first attempt counted once", first, ok)
	}
	if j, _ := rt.find(b); j >= 0 {
		t.Fatal("busy attempt remembered for another token")
	}
	// A retried entry past its horizon is dropped; a busy first attempt
	// never retried is settled as a try-once one, in its group.
	rt.add(entry{h: b, keyHash: 1, group: 9, nowUs: 1000, nowMs: 1})
	rt.sweep(3 + 1000)
	if i, _ := rt.find(a); i < 0 {
		t.Fatal("retried entry swept within its horizon since its last attempt")
	}
	rt.sweep(1002 + 1000)
	if i, _ := rt.find(a); i >= 0 {
		t.Fatal("entry kept past its horizon")
	}
	if settled[9] != 1 || settled[7] != 0 || rt.mayWait(1) {
		t.Fatalf("settled %v, mayWait %v; want group 9's attempt settled once and nothing waiting", settled, rt.mayWait(1))
	}
	// A full bucket evicts: memory stays bounded, and what it evicts is
	// settled.
	for i := 0; i < 3*retrySlots; i++ {
		rt.add(entry{h: rt.hash(uint64(i), "tok"), keyHash: uint64(i), group: 1, nowMs: 5000})
	}
	if settled[1] != 2*retrySlots {
		t.Fatalf("%d evicted entries settled, want %d", settled[1], 2*retrySlots)
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
