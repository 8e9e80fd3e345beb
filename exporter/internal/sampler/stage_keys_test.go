package sampler

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// keyPassLog counts the whole-keyspace pass's round trips: SCAN calls
// without MATCH sent alone, and pipelines of key reads, with or without
// such a SCAN.
type keyPassLog struct {
	mu                            sync.Mutex
	scansAlone, reads, readsScans int
	pipelineScans                 int
}

func (l *keyPassLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *keyPassLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if keyspaceScan(cmd) {
			l.mu.Lock()
			l.scansAlone++
			l.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (l *keyPassLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ttls, scans := 0, 0
		for _, c := range cmds {
			switch {
			case c.Name() == "pexpiretime" || c.Name() == "pttl":
				ttls++
			case keyspaceScan(c):
				scans++
			}
		}
		l.mu.Lock()
		if ttls > 0 {
			l.reads++
			if scans > 0 {
				l.readsScans++
			}
		}
		l.pipelineScans += scans
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func keyspaceScan(cmd redis.Cmder) bool {
	return cmd.Name() == "scan" && len(cmd.Args()) == 4 // scan <cursor> count <n>
}

// The whole-keyspace pass reads each page's last batch in the same round
// trip as the SCAN of the next page: one round trip per page, and every
// key read once.
func TestKeyPassScansWithReads(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const keys = 2_050
	pipe := rdb.Pipeline()
	for i := range keys {
		pipe.Set(ctx, "cache:"+strconv.Itoa(i), "v", time.Hour)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t, srv.Addr)
	cfg.Notify, cfg.Unpaced, cfg.Batch = NotifyOff, true, 60 // pages of about 100 keys: two batches each
	e := newTestSampler(t, cfg)
	nodes := e.refreshNodes(ctx)
	log := &keyPassLog{}
	nodes[0].env.rdb.AddHook(log)

	s := e.Sample(ctx)[0]
	if !s.Up || s.KeysScanned != keys || s.ScanCycles != 1 {
		t.Fatalf("up %v, %d keys scanned in %d passes (errors %v), want all %d in one", s.Up, s.KeysScanned, s.ScanCycles, s.Errors, keys)
	}
	if g := s.Pass.Groups["cache:*"]; g == nil || g.Keys != keys {
		t.Fatalf("cache:* group %+v, want %d keys", g, keys)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	pages := log.scansAlone + log.pipelineScans
	t.Logf("%d pages: %d SCAN alone, %d with a batch of reads; %d read pipelines", pages, log.scansAlone, log.pipelineScans, log.reads)
	if log.scansAlone != 1 {
		t.Errorf("%d SCAN calls sent alone, want only the pass's first", log.scansAlone)
	}
	if log.readsScans != pages-1 || log.pipelineScans != pages-1 {
		t.Errorf("%d of %d read pipelines carried a SCAN (%d SCAN calls in pipelines), want one for each page but the last: %d",
			log.readsScans, log.reads, log.pipelineScans, pages-1)
	}
}
