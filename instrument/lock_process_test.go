package instrument_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Environment of a child process of TestLockAcrossProcesses.
const (
	lockChildAddr   = "CACHEWATCH_LOCK_CHILD_ADDR"
	lockChildMarker = "CACHEWATCH_LOCK_CHILD_MARKER"
	lockChildPrefix = "LOCKCHILD "
)

// lockChildReport is what a child process prints: its own counts.
type lockChildReport struct {
	Sent, Entered, Overlaps int64
	Attempts, Acquired      float64
}

// Several real processes (this test binary, re-executed) with several
// goroutines each contend for one lock. The critical section creates a
// marker file with O_EXCL, so two holders in different processes would
// collide on it.
func TestLockAcrossProcesses(t *testing.T) {
	if os.Getenv(lockChildAddr) != "" {
		lockChild(t)
		return
	}
	srv := redistest.Start(t)
	marker := filepath.Join(t.TempDir(), "held")
	const procs = 3
	reports := make([]lockChildReport, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLockAcrossProcesses$", "-test.count=1")
			cmd.Env = append(os.Environ(), lockChildAddr+"="+srv.Addr, lockChildMarker+"="+marker)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("child %d: %v\n%s%s", i, err, out, stderr.String())
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), lockChildPrefix); ok {
					if err := json.Unmarshal([]byte(line), &reports[i]); err != nil {
						t.Errorf("child %d report: %v", i, err)
					}
					return
				}
			}
			t.Errorf("child %d printed no report:\n%s", i, out)
		}()
	}
	wg.Wait()
	var entered, sent int64
	for i, r := range reports {
		if r.Overlaps != 0 {
			t.Fatalf("child %d met another holder %d times", i, r.Overlaps)
		}
		if r.Attempts != float64(r.Sent) {
			t.Fatalf("child %d: lock_attempts_total = %v, SET NX sent = %d", i, r.Attempts, r.Sent)
		}
		if r.Acquired != float64(r.Entered) {
			t.Fatalf("child %d: acquired attempts = %v, critical sections = %d", i, r.Acquired, r.Entered)
		}
		entered += r.Entered
		sent += r.Sent
	}
	if sent == entered {
		t.Fatal("no attempt ever found the lock busy: the processes did not contend")
	}
	if entered != procs*lockChildGoroutines*lockChildRounds {
		t.Fatalf("critical sections = %d, want %d", entered, procs*lockChildGoroutines*lockChildRounds)
	}
}

const lockChildGoroutines, lockChildRounds = 4, 5

func lockChild(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(lockChildAddr)})
	defer rdb.Close()
	sent := &locktest.SetNXCounter{}
	rdb.AddHook(sent)
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	marker := os.Getenv(lockChildMarker)
	var entered, overlaps atomic.Int64
	var wg sync.WaitGroup
	for range lockChildGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range lockChildRounds {
				l, err := c.Lock(context.Background(), "lock:{cross-process}", instrument.LockOptions{
					TTL:     10 * time.Second,
					Backoff: instrument.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond, Retries: 100000},
				})
				if err != nil {
					t.Error(err)
					return
				}
				f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
				switch {
				case errors.Is(err, os.ErrExist):
					overlaps.Add(1)
				case err != nil:
					t.Error(err)
				default:
					entered.Add(1)
					time.Sleep(300 * time.Microsecond)
					f.Close()
					os.Remove(marker)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	report, _ := json.Marshal(lockChildReport{
		Sent: sent.N(), Entered: entered.Load(), Overlaps: overlaps.Load(),
		Attempts: metrictest.Sum(t, reg, "cachewatch_lock_attempts_total"),
		Acquired: metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "acquired"),
	})
	os.Stdout.WriteString(lockChildPrefix + string(report) + "\n")
}
