package instrument

import (
	runtimemetrics "runtime/metrics"
	"sync"
	"time"
)

// starvedWait is the least wait that marks this process as starved of CPU
// when RedisTimeout is short: on a process that gets a core, a timer fires
// and a runnable goroutine runs within microseconds; on a busy machine,
// within a few milliseconds.
const starvedWait = 10 * time.Millisecond

// starvation tells a round trip that timed out because this process was
// starved of CPU from one that Redis left unanswered. Starved, the reply
// may have waited in the socket all along: the process did not run the
// goroutine that reads it (Go polls the network only when a core has
// nothing else to run, or every 10 ms), or did not run at all.
//
// Two signs, read only when a round trip timed out: the timeout itself
// was noticed late (the process was off the CPU when it was due), or,
// since the last reading, goroutines waited long to run
// (runtime/metrics' /sched/latencies). A sign seen makes every timeout of
// the next RedisTimeout the process's own: the round trips of a crowd
// time out together, and only the first reading covers the wait.
type starvation struct {
	mu     sync.Mutex
	sample []runtimemetrics.Sample
	counts []uint64  // the histogram's counts at the last reading
	seen   time.Time // when a sign was last seen
}

// processStarvation is the process's starvation watch, shared by its
// Caches: CPU is the process's.
var processStarvation = sync.OnceValue(newStarvation)

func newStarvation() *starvation {
	s := &starvation{sample: []runtimemetrics.Sample{{Name: "/sched/latencies:seconds"}}}
	s.waitedSince(0) // the baseline
	return s
}

// starved reports whether a round trip whose timeout t was due at deadline
// timed out because this process was starved (see starvation).
func (s *starvation) starved(deadline time.Time, t time.Duration) bool {
	long := max(t/10, starvedWait)
	now := time.Now()
	late := now.Sub(deadline) > long
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waitedSince(long) || late {
		s.seen = now
	}
	return !s.seen.Before(deadline.Add(-t)) // the zero time is before any deadline
}

// waitedSince reports whether a goroutine waited at least long to run
// since the last reading, and takes a new one. s.mu is held.
func (s *starvation) waitedSince(long time.Duration) bool {
	runtimemetrics.Read(s.sample)
	if s.sample[0].Value.Kind() != runtimemetrics.KindFloat64Histogram {
		return false // not in this Go runtime: only lateness tells
	}
	h := s.sample[0].Value.Float64Histogram()
	waited := false
	if len(s.counts) == len(h.Counts) {
		for i, n := range h.Counts {
			if n > s.counts[i] && h.Buckets[i] >= long.Seconds() {
				waited = true
				break
			}
		}
	}
	s.counts = append(s.counts[:0], h.Counts...)
	return waited
}
