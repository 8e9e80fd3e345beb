package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// timeline is one worker's run in wall-clock nanoseconds (shared by the
// processes of one machine): when its callers started and ended, and when
// its loader calls ran. CACHEWATCH_STAMPEDE_TIMELINE=1 prints them.
type timeline struct {
	FirstStart, LastStart, FirstEnd, LastEnd int64
	Loads                                    [][2]int64
	CPU                                      int64 // user+system ns during the run
	GCs                                      int64 // garbage collections during the run
	Alloc                                    int64 // bytes allocated during the run
}

// tl records the worker's current run (reset by each "run" command).
var tl timelineRec

// timelineRec is a timeline being recorded, safe for concurrent use.
type timelineRec struct {
	mu sync.Mutex
	t  timeline
}

// reset starts a new run.
func (r *timelineRec) reset() {
	r.mu.Lock()
	gcs, alloc := memCounts()
	r.t = timeline{CPU: -cpuNanos(), GCs: -gcs, Alloc: -alloc}
	r.mu.Unlock()
}

// timelineOn: CACHEWATCH_STAMPEDE_TIMELINE is set. Only then are the
// garbage collections and allocations read: runtime.ReadMemStats stops the
// world and empties every P's caches of memory and stacks: read around
// every crowd, it moves the stale p99 on p4-k1 from 0.002–0.004 ms to
// 0.008–0.010 ms.
var timelineOn = os.Getenv("CACHEWATCH_STAMPEDE_TIMELINE") != ""

// cpuNanos is the process's user and system CPU time so far.
func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// memCounts returns the garbage collections so far (one during a crowd
// scans the stacks of its thousand goroutines) and the heap bytes
// allocated so far, both from one ReadMemStats; zeros unless timelineOn.
func memCounts() (gcs, alloc int64) {
	if !timelineOn {
		return 0, 0
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.NumGC), int64(ms.TotalAlloc)
}

// caller records one caller's start and end.
func (r *timelineRec) caller(start, end time.Time) {
	s, e := start.UnixNano(), end.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t.FirstStart == 0 || s < r.t.FirstStart {
		r.t.FirstStart = s
	}
	r.t.LastStart = max(r.t.LastStart, s)
	if r.t.FirstEnd == 0 || e < r.t.FirstEnd {
		r.t.FirstEnd = e
	}
	r.t.LastEnd = max(r.t.LastEnd, e)
}

// load records one loader call.
func (r *timelineRec) load(start, end time.Time) {
	r.mu.Lock()
	r.t.Loads = append(r.t.Loads, [2]int64{start.UnixNano(), end.UnixNano()})
	r.mu.Unlock()
}

// snapshot returns the run so far, its CPU time included.
func (r *timelineRec) snapshot() timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	gcs, alloc := memCounts()
	t.CPU, t.GCs, t.Alloc = t.CPU+cpuNanos(), t.GCs+gcs, t.Alloc+alloc
	return t
}

// printTimelines writes, in ms from the earliest caller's start, each
// process's garbage collections and bytes allocated during the run, its
// callers' starts, its loads (the first two and the last when there are
// more) and its callers' ends; then how long
// after the load it waited for each process's last caller ended (its own
// load's end, or the fleet's last load's end for a process that did not
// load: the wake-up's delivery), and each process's CPU time.
func printTimelines(key string, tls []timeline) {
	if !timelineOn || len(tls) == 0 || tls[0].FirstStart == 0 {
		return
	}
	t0 := tls[0].FirstStart
	var lastLoadEnd int64
	for _, t := range tls {
		t0 = min(t0, t.FirstStart)
		for _, l := range t.Loads {
			lastLoadEnd = max(lastLoadEnd, l[1])
		}
	}
	ms := func(ns int64) string { return fmt.Sprintf("%.1f", float64(ns-t0)/1e6) }
	var b strings.Builder
	fmt.Fprintf(&b, "TIMELINE %s\n", key)
	var tails, cpus []float64
	for i, t := range tls {
		var loads []string
		for _, l := range t.Loads {
			loads = append(loads, ms(l[0])+"-"+ms(l[1]))
		}
		if len(loads) > 3 {
			loads = append(loads[:2], fmt.Sprintf("…%d… %s", len(loads), loads[len(loads)-1]))
		}
		fmt.Fprintf(&b, "  p%02d gc %d alloc %dKB start %s..%s loads [%s] ends %s..%s\n", i, t.GCs, t.Alloc>>10, ms(t.FirstStart), ms(t.LastStart), strings.Join(loads, " "), ms(t.FirstEnd), ms(t.LastEnd))
		ref := lastLoadEnd // a process that did not load waits for the fleet's load
		if len(t.Loads) > 0 {
			ref = 0
			for _, l := range t.Loads {
				ref = max(ref, l[1])
			}
		}
		tails = append(tails, float64(t.LastEnd-ref)/1e6)
		cpus = append(cpus, float64(t.CPU)/1e6)
	}
	slices.Sort(tails)
	fmt.Fprintf(&b, "  last end after the load it waited for (own, else the fleet's last; ms, sorted): %.1f\n", tails)
	slices.Sort(cpus)
	fmt.Fprintf(&b, "  CPU ms per process during the run (sorted): %.2f\n", cpus)
	fmt.Fprint(os.Stderr, b.String())
}
