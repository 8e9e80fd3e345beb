package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkStampedeHolderDeath: the process that won a cold key's refresh
// dies (SIGKILL, as kill -9) halfway through its load. Every variant that
// coalesces across processes (Fleet: cachewatch, rueidisaside,
// lock-then-poll) runs it. Each iteration starts fresh worker processes,
// warms them up, and releases a crowd on a new key whose callers, in every
// process, call again after an error until they have the value (60 s at
// most): the first loader call of the fleet kills its own process mid-load.
//
//	go test -run '^$' -bench BenchmarkStampedeHolderDeath -benchtime 5x ./bench/
//
// Reported, over the iterations: recovery-p50-ms and recovery-p99-ms (from
// the kill until a caller of another process had the value),
// all-served-p50-ms and all-served-p99-ms (until the last of them had it),
// loader-calls/refresh (the fleet's loader calls for the key, the killed
// one included, per iteration) and caller-errors (errors returned to the
// surviving callers before they had the value, per iteration).
func BenchmarkStampedeHolderDeath(b *testing.B) {
	srv := redistest.Start(b)
	for _, sh := range holderDeathShapes {
		b.Run(sh.Name, func(b *testing.B) {
			for _, v := range stampedeVariants {
				if v.Fleet {
					b.Run(v.Name, func(b *testing.B) { benchHolderDeath(b, srv.Addr, sh, v) })
				}
			}
		})
	}
}

var holderDeathShapes = []stampedeShape{
	{Name: "p4-k1", Procs: 4, Keys: 1, PerKey: 250, Load: 50 * time.Millisecond},
}

// holderDeathDeadline bounds how long a surviving caller calls again.
const holderDeathDeadline = 60 * time.Second

func benchHolderDeath(b *testing.B, addr string, sh stampedeShape, v stampedeVariant) {
	var recovery, allServed []time.Duration
	var calls, errs int64
	for i := 0; i < b.N; i++ {
		r := holderDeathRound(b, addr, sh, v, fmt.Sprintf("holder-death:%s:%s:%d:%d", sh.Name, v.Name, time.Now().UnixNano(), i))
		recovery, allServed = append(recovery, r.recovery), append(allServed, r.allServed)
		calls, errs = calls+r.calls, errs+r.errors
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(pct(recovery, 50), "recovery-p50-ms")
	b.ReportMetric(pct(recovery, 99), "recovery-p99-ms")
	b.ReportMetric(pct(allServed, 50), "all-served-p50-ms")
	b.ReportMetric(pct(allServed, 99), "all-served-p99-ms")
	b.ReportMetric(float64(calls)/n, "loader-calls/refresh")
	b.ReportMetric(float64(errs)/n, "caller-errors")
}

// holderDeathResult is one iteration's outcome.
type holderDeathResult struct {
	recovery, allServed time.Duration
	calls, errors       int64
}

// holderDeathRound runs one iteration on key with fresh workers.
func holderDeathRound(b testing.TB, addr string, sh stampedeShape, v stampedeVariant, key string) holderDeathResult {
	b.Helper()
	ws := startStampedeWorkers(b, v.Name, sh, addr, []string{workerMortalEnv + "=1"})
	defer ws.stop()
	ws.run(b, "warmup:"+v.Name, sh)
	ws.collectGarbage(b)
	replies := ws.sendSurviving(b, fmt.Sprintf("persist %s %d", key, sh.PerKey))
	var r holderDeathResult
	var killedAt, firstOK, lastOK int64
	r.calls = 1 // the killed process's, which died in it
	for i, rep := range replies {
		if rep.killedAt != 0 {
			killedAt = rep.killedAt
			continue
		}
		var p persistReply
		if err := json.Unmarshal(rep.line, &p); err != nil {
			b.Fatalf("worker %d: %v", i, err)
		}
		if p.Unserved > 0 {
			b.Fatalf("worker %d: %d callers never had the value within %v", i, p.Unserved, holderDeathDeadline)
		}
		r.calls, r.errors = r.calls+p.Calls, r.errors+p.Errors
		if firstOK == 0 || p.FirstOK < firstOK {
			firstOK = p.FirstOK
		}
		lastOK = max(lastOK, p.LastOK)
	}
	if killedAt == 0 {
		b.Fatal("no process died: no loader call reached the mortal loader")
	}
	r.recovery, r.allServed = time.Duration(firstOK-killedAt), time.Duration(lastOK-killedAt)
	return r
}

// workerReply is one worker's answer to a command: its reply line, or when
// it killed itself (a mortal loader), when.
type workerReply struct {
	line     []byte
	killedAt int64 // unix ns
}

// sendSurviving gives every worker cmd and collects each one's reply; a
// worker that kills itself meanwhile reports when instead. It fails the
// benchmark if a worker ends without either.
func (ws stampedeWorkers) sendSurviving(b testing.TB, cmd string) []workerReply {
	b.Helper()
	for _, w := range ws {
		if _, err := io.WriteString(w.in, cmd+"\n"); err != nil {
			b.Fatal(err)
		}
	}
	replies := make([]workerReply, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = w.reply()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("worker %d: %v", i, err)
		}
	}
	return replies
}

// reply reads the worker's next reply, or the notice of its death.
func (w *stampedeWorker) reply() (workerReply, error) {
	for w.out.Scan() {
		if line, ok := strings.CutPrefix(w.out.Text(), workerPrefix); ok {
			return workerReply{line: []byte(line)}, nil
		}
		if at, ok := strings.CutPrefix(w.out.Text(), workerKilledPrefix); ok {
			var r workerReply
			_, err := fmt.Sscan(at, &r.killedAt)
			return r, err
		}
	}
	return workerReply{}, fmt.Errorf("ended without a reply: %v", w.out.Err())
}

// workerKilledPrefix leads the line a mortal loader writes as it kills its
// process: when, in unix ns.
const workerKilledPrefix = "STAMPEDE-KILLED "

// mortalRun is the key of the worker's persist run in progress, nil
// outside one: only its loader calls may die.
var mortalRun atomic.Pointer[string]

// mortalLoader wraps load: during a persist run, the fleet's first loader
// call (the one that claims the run's mark in Redis) sleeps half the load,
// then writes when and kills its own process with SIGKILL — no deferred
// call, no cleanup, no closed connection other than by the kernel.
func mortalLoader(rdb *redis.Client, load loader, took time.Duration) loader {
	return func(ctx context.Context) (string, error) {
		if key := mortalRun.Load(); key != nil {
			won, err := rdb.SetNX(context.WithoutCancel(ctx), *key+":died", 1, time.Hour).Result()
			if err == nil && won {
				time.Sleep(took / 2)
				fmt.Fprintf(os.Stdout, "%s%d\n", workerKilledPrefix, time.Now().UnixNano())
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		return load(ctx)
	}
}

// persistReply is a worker's answer to "persist".
type persistReply struct {
	FirstOK, LastOK int64 // unix ns: the first and last caller to have the value
	Errors          int64 // errors returned before the value
	Unserved        int   // callers without the value at the deadline
	Calls           int64 // loader calls during the run
}

// persist has perKey callers fetch key, each calling again after an error
// until it has the value or holderDeathDeadline has passed.
func persist(fetch fetcher, key string, perKey int, calls *atomic.Int64) persistReply {
	mortalRun.Store(&key)
	defer mortalRun.Store(nil)
	callsBefore := calls.Load()
	ctx, cancel := context.WithTimeout(context.Background(), holderDeathDeadline)
	defer cancel()
	var r persistReply
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range perKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs, ok := fetchUntilServed(ctx, fetch, key)
			now := time.Now().UnixNano()
			mu.Lock()
			defer mu.Unlock()
			r.Errors += errs
			if !ok {
				r.Unserved++
				return
			}
			if r.FirstOK == 0 || now < r.FirstOK {
				r.FirstOK = now
			}
			r.LastOK = max(r.LastOK, now)
		}()
	}
	close(start)
	wg.Wait()
	r.Calls = calls.Load() - callsBefore
	return r
}

// fetchUntilServed calls fetch until it returns the value or ctx ends,
// and returns the errors it got meanwhile.
func fetchUntilServed(ctx context.Context, fetch fetcher, key string) (errs int64, ok bool) {
	for ctx.Err() == nil {
		if _, err := fetch(ctx, key); err == nil {
			return errs, true
		}
		errs++
	}
	return errs, false
}

// TestStampedeHolderDeath runs one iteration of the holder-death shape for
// every Fleet variant, on 2 processes of 5 callers, so that the harness and
// the variants' takeover stay correct (CI runs tests, not benchmarks): one
// process dies in its load, every caller of the other one gets the value,
// and the fleet loads again — once.
func TestStampedeHolderDeath(t *testing.T) {
	srv := redistest.Start(t)
	sh := stampedeShape{Name: "test", Procs: 2, Keys: 1, PerKey: 5, Load: 50 * time.Millisecond}
	for _, v := range stampedeVariants {
		if !v.Fleet {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			r := holderDeathRound(t, srv.Addr, sh, v, "holder-death-test:"+v.Name)
			if r.calls != 2 {
				t.Errorf("%d loader calls, want 2: the killed one and one takeover", r.calls)
			}
			if r.recovery <= 0 || r.allServed < r.recovery {
				t.Errorf("recovery %v, all served %v: want 0 < recovery <= all served", r.recovery, r.allServed)
			}
			t.Logf("recovery %v, all served %v, %d caller errors", r.recovery, r.allServed, r.errors)
		})
	}
}
