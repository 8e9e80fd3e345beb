// Package crowd releases many goroutines at once on one call and times each
// of them: the stampede of the instrument and bench benchmarks.
package crowd

import (
	"sync"
	"sync/atomic"
	"time"
)

// Run starts n goroutines, releases them together on call and returns each
// one's latency (from its release to call's return) and how many calls
// returned an error.
func Run(n int, call func() error) (latencies []time.Duration, failed int) {
	start := make(chan struct{})
	lat := make([]time.Duration, n)
	var failures atomic.Int64
	var wg sync.WaitGroup
	for i := range lat {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			if call() != nil {
				failures.Add(1)
			}
			lat[i] = time.Since(t0)
		}()
	}
	close(start)
	wg.Wait()
	return lat, int(failures.Load())
}
