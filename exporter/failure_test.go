package exporter_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/hostileredis"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// onlySelfMetrics fails when a failed node still exports anything but up 0
// and the self-metrics: no value of an older sample may look fresh.
func onlySelfMetrics(t *testing.T, got map[string]float64, node string) {
	t.Helper()
	self := []string{"cachewatch_exporter_up{", "cachewatch_exporter_sample_duration_seconds{",
		"cachewatch_exporter_last_success_timestamp_seconds{", "cachewatch_exporter_keys_scanned_total{",
		"cachewatch_exporter_scan_cycles_total{", "cachewatch_exporter_sample_truncated_total{",
		"cachewatch_exporter_sample_errors_total{"}
	for k := range got {
		if !strings.Contains(k, fmt.Sprintf("node=%q", node)) {
			continue
		}
		ok := false
		for _, p := range self {
			ok = ok || strings.HasPrefix(k, p)
		}
		if !ok {
			t.Errorf("failed node still exports %s", k)
		}
	}
	if got[fmt.Sprintf("cachewatch_exporter_up{node=%q}", node)] != 0 {
		t.Errorf("up is not 0")
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{addr}, DialTimeout: 200 * time.Millisecond}})
	s := e.Sample(context.Background())[0]
	if s.Up || s.Err == nil || !strings.Contains(s.Err.Error(), "connect") {
		t.Fatalf("unreachable: up=%v err=%v", s.Up, s.Err)
	}
	body, got := scrape(t, reg)
	onlySelfMetrics(t, got, addr)
	expect(t, got, addr, map[string]float64{`cachewatch_exporter_sample_errors_total{stage="connect",class="connection"}`: 1})
	metrictest.PromtoolCheck(t, body)
}

func TestWrongPassword(t *testing.T) {
	srv := redistest.Start(t)
	must(t, srv.Client(t).ConfigSet(context.Background(), "requirepass", "right-secret").Err())
	const wrong = "wrong-secret-do-not-print"
	var logs bytes.Buffer
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Password: wrong},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := e.Sample(context.Background())[0]
	var se *snapshot.StageError
	if s.Up || !errors.As(s.Err, &se) || se.Class != "auth" {
		t.Fatalf("wrong password: up=%v err=%v", s.Up, s.Err)
	}
	if strings.Contains(s.Err.Error(), wrong) || strings.Contains(logs.String(), wrong) {
		t.Fatalf("the password leaked: %v / %s", s.Err, logs.String())
	}
	if opts := fmt.Sprintf("%+v %v", exporter.Options{Target: exporter.Target{Password: wrong}}, exporter.Target{Password: wrong}); strings.Contains(opts, wrong) {
		t.Fatalf("printing options shows the password: %s", opts)
	}
	if !strings.Contains(logs.String(), "redis sample failed") {
		t.Fatalf("failure not logged: %q", logs.String())
	}
	_, got := scrape(t, reg)
	onlySelfMetrics(t, got, srv.Addr)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_sample_errors_total{stage="connect",class="auth"}`: 1})

	// The right password (as the command reads it from env or file) works.
	e2, _ := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Password: "right-secret"}})
	if s := e2.Sample(context.Background())[0]; !s.Up {
		t.Fatalf("right password: %v", s.Err)
	}
}

// An ACL user without GETRANGE and XINFO: those stages fail with class
// noperm and are counted, each refusal is logged once per stage; everything
// else is still sampled.
func TestNoPerm(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	seed(t, admin)
	ctx := context.Background()
	must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "on", ">sampler-pw", "~*", "+@all", "-getrange", "-xinfo").Err())
	var logs bytes.Buffer
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "sampler-pw"},
		Queues: queues, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := e.Sample(ctx)[0]
	if !s.Up {
		t.Fatalf("NOPERM on some commands took the node down: %v", s.Err)
	}
	clk.Advance(time.Hour) // past every backoff: the refused commands are tried again
	e.Sample(ctx)
	for _, cmd := range []string{"command=getrange", "command=xinfo|groups"} {
		if n := strings.Count(logs.String(), cmd); n != 1 {
			t.Errorf("refusal of %s logged %d times, want once:\n%s", cmd, n, logs.String())
		}
	}
	body, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_up`: 1,
		`cachewatch_exporter_sample_errors_total{stage="locks",class="noperm"}`:  2,
		`cachewatch_exporter_sample_errors_total{stage="queues",class="noperm"}`: 2,
		`cachewatch_exporter_locks_held{key_group="lock:stuck:*"}`:               stuckLocks,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:stuck:*"}`:        stuckLocks,
		`cachewatch_exporter_keys_sampled{key_group="sync:item:*"}`:              syncKeys,
		`cachewatch_exporter_queue_length{queue="jobs:list",type="list"}`:        listLen,
	})
	for k := range got {
		if strings.HasPrefix(k, "cachewatch_exporter_locks_long_held") || strings.Contains(k, `queue="orders"`) {
			t.Errorf("exported without permission to read it: %s", k)
		}
	}
	metrictest.PromtoolCheck(t, body)
}

// A server killed in the middle of a sample: up 0, and the keyspace series
// of the earlier complete pass are dropped rather than shown as fresh.
func TestKilledMidSample(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 2000; i++ {
		pipe.Set(ctx, fmt.Sprintf("item:%d", i), "v", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}, ReadTimeout: time.Second},
		Clock:  clk,
		Sample: exporter.SampleOptions{KeysPerSecond: 2000, MaxKeys: 100000, MaxDuration: time.Minute, Interval: 2 * time.Minute, ScanCount: 50, Batch: 50},
	})
	if s := e.Sample(ctx)[0]; !s.Up || s.Pass == nil {
		t.Fatalf("first sample: %+v", s)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_keys_sampled{key_group="item:*"}`: 2000})

	done := make(chan *snapshot.Node)
	go func() { done <- e.Sample(ctx)[0] }()
	waitForScans(t, srv.Addr, 3) // the paced sample is well under way
	srv.Kill()
	s := <-done
	if s.Up || s.Err == nil {
		t.Fatalf("killed mid-sample: up=%v err=%v", s.Up, s.Err)
	}
	_, got = scrape(t, reg)
	onlySelfMetrics(t, got, srv.Addr)

	srv.Restart() // empty
	if s2 := e.Sample(ctx)[0]; s2 != s {
		t.Fatalf("a failed node was dialled again before its backoff passed: %+v", s2)
	}
	// The kill may fail two stages of the sample in flight (the backoff
	// then doubles), so step the clock a second at a time: the node must be
	// dialled again and come up once its backoff has passed. Two failed
	// dials (both passes reconnecting after the kill) also make go-redis's
	// pool refuse to dial for about a second of real time, which the fake
	// clock does not move: each step also lets some real time pass.
	must(t, poll.Check(ctx, poll.Bound, 150*time.Millisecond, func() error {
		clk.Advance(time.Second)
		if s2 := e.Sample(ctx)[0]; !s2.Up {
			return fmt.Errorf("still down after restart: %v", s2.Err)
		}
		return nil
	}))
	_, got = scrape(t, reg)
	if v, ok := got[fmt.Sprintf(`cachewatch_exporter_keys_sampled{key_group="item:*",node=%q}`, srv.Addr)]; ok {
		t.Fatalf("keys of the killed server still exported after restart: %v", v)
	}
}

// waitForScans waits until the server has answered at least n SCANs, as
// seen by a separate connection.
func waitForScans(t *testing.T, addr string, n int) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	poll.Until(t, fmt.Sprintf("the sampler to scan %d times", n), func() bool {
		info, err := c.Info(context.Background(), "commandstats").Result()
		must(t, err)
		for _, line := range strings.Split(info, "\n") {
			var calls int
			if strings.HasPrefix(line, "cmdstat_scan:") {
				fmt.Sscanf(strings.TrimPrefix(line, "cmdstat_scan:"), "calls=%d", &calls)
			}
			if calls >= n {
				return true
			}
		}
		return false
	})
}

func TestParseURL(t *testing.T) {
	tg, err := exporter.ParseURL("rediss://sampler@redis.example:6380/2")
	must(t, err)
	if tg.Addrs[0] != "redis.example:6380" || tg.Username != "sampler" || tg.DB != 2 || tg.TLS == nil || tg.TLS.ServerName != "redis.example" {
		t.Fatalf("parsed %+v", tg)
	}
	if tg, err = exporter.ParseURL("redis://localhost"); err != nil || tg.Addrs[0] != "localhost:6379" || tg.TLS != nil {
		t.Fatalf("default port: %+v %v", tg, err)
	}
	if _, err := exporter.ParseURL("redis://u:hunter2@host:1"); !errors.Is(err, exporter.ErrPasswordInURL) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password in URL: %v", err)
	}
	// A password in a query parameter is refused too, naming the parameter
	// and never repeating its value (the command refuses it the same way).
	for _, q := range []string{"password=hunter2", "requirepass=hunter2", "PASS=hunter2", "auth=hunter2", "p%61ssword=hunter2",
		"dial_timeout=2s&password=hunter2", "password=hunter2%zz"} {
		_, err := exporter.ParseURL("redis://host:1/0?" + q)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(…?%s) = %v, want a refusal that does not repeat the password", q, err)
		}
	}
	if _, err := exporter.ParseURL("redis://host:1/0?password=hunter2"); !errors.Is(err, exporter.ErrPasswordInURL) || !strings.Contains(err.Error(), `parameter "password"`) {
		t.Errorf("password parameter: %v", err)
	}
	if tg, err := exporter.ParseURL("redis://host:1/0?dial_timeout=2s"); err != nil || tg.Password != "" {
		t.Errorf("a parameter without a password: %+v %v", tg, err)
	}
	for _, bad := range []string{"http://host:1", "redis://host:1/x", "redis://", "redis://u:hunter2@host:%zz"} {
		_, err := exporter.ParseURL(bad)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) = %v", bad, err)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := exporter.New(exporter.Options{}); err == nil || !strings.Contains(err.Error(), "no Redis address") {
		t.Fatalf("no addrs: %v", err)
	}
	if _, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{"nohostport"}}}); err == nil {
		t.Fatal("bad address accepted")
	}
}

// minimalACL is the ACL of docs/exporter.md, exactly.
var minimalACL = []any{"resetkeys", "~*", "resetchannels", "-@all", "+ping", "+info", "+scan", "+pexpiretime", "+getrange",
	"+type", "+llen", "+xlen", "+xrange", "+xinfo|groups", "+xpending", "+zcard", "+zcount", "+zrange", "+object|freq", "+cluster|nodes",
	"+latency|histogram", "+config|get", "+psubscribe", "&__keyspace@0__:lock:*"}

// The minimal read-only ACL user documented in docs/exporter.md can run
// every stage: no error, every series present.
func TestMinimalACLUser(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu") // hot keys: OBJECT FREQ
	admin := srv.Client(t)
	seed(t, admin)
	ctx := context.Background()
	must(t, admin.Do(ctx, append([]any{"ACL", "SETUSER", "sampler", "reset", "on", ">sampler-pw"}, minimalACL...)...).Err())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "sampler-pw"},
		Queues: queues, HotKeys: 3})
	s := e.Sample(ctx)[0]
	if !s.Up || len(s.Errors) > 0 {
		t.Fatalf("minimal user: up=%v errors=%v", s.Up, s.Errors)
	}
	if s.Pass == nil || len(s.Pass.HotKeys) == 0 {
		t.Fatalf("minimal user: no hot keys read: %+v", s.Pass)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_long_held{key_group="lock:stuck:*"}`:            0,
		`cachewatch_exporter_stream_group_pending{group="workers",queue="orders"}`: pendingMsgs,
	})
}

// A scrape never reaches Redis: while a sample is stuck on a paused
// (SIGSTOPped) server, scrapes still answer at once with the last sample.
func TestScrapeDuringStuckSample(t *testing.T) {
	srv := redistest.Start(t)
	seed(t, srv.Client(t))
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, ReadTimeout: time.Minute}})
	if s := e.Sample(context.Background())[0]; !s.Up {
		t.Fatal(s.Err)
	}
	srv.Pause()
	done := make(chan *snapshot.Node, 1)
	go func() { done <- e.Sample(context.Background())[0] }()
	_, got := scrape(t, reg)
	select {
	case s := <-done:
		t.Fatalf("the sample of a paused server ended: %+v", s)
	default:
	}
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_up`:                                   1,
		`cachewatch_exporter_locks_held{key_group="lock:stuck:*"}`: stuckLocks,
	})
	srv.Resume()
	if s := <-done; !s.Up {
		t.Fatalf("after resume: %v", s.Err)
	}
}

// A server whose INFO reply does not parse (here a RESP endpoint that is not
// Redis) is down for the exporter: up 0, an info/malformed error, nothing else.
func TestMalformedInfo(t *testing.T) {
	addr := fakeRESP(t, "# Stats\r\nkeyspace_hits:lots\r\n")
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{addr}, Mode: exporter.ModeStandalone}})
	s := e.Sample(context.Background())[0]
	if s.Up || !errors.Is(s.Err, sampler.ErrMalformed) {
		t.Fatalf("malformed INFO: up=%v err=%v", s.Up, s.Err)
	}
	_, got := scrape(t, reg)
	onlySelfMetrics(t, got, addr)
	expect(t, got, addr, map[string]float64{`cachewatch_exporter_sample_errors_total{stage="info",class="malformed"}`: 1})
}

// fakeRESP serves a minimal RESP2 endpoint: +PONG to PING, info as the INFO
// reply, an error to anything else.
func fakeRESP(t *testing.T, info string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveRESP(c, info)
		}
	}()
	return l.Addr().String()
}

func serveRESP(c net.Conn, info string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := hostileredis.ReadCommand(r)
		if err != nil {
			return
		}
		switch strings.ToUpper(args[0]) {
		case "PING":
			_, err = io.WriteString(c, "+PONG\r\n")
		case "INFO":
			_, err = fmt.Fprintf(c, "$%d\r\n%s\r\n", len(info), info)
		default:
			_, err = io.WriteString(c, "-ERR unknown command\r\n")
		}
		if err != nil {
			return
		}
	}
}

// A server that answers late (paused past the read timeout in the middle of
// both passes) fails the sample — up 0, a timeout counted — but neither
// pass starts over: the whole-keyspace pass reads each key once, and the
// lock sync that started before the pause is the one that completes, with
// exact figures.
func TestTimeoutKeepsPasses(t *testing.T) {
	const items, locks = 10_000, 100
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < items; i++ {
		pipe.Set(ctx, fmt.Sprintf("item:%d", i), "v", time.Hour)
	}
	for i := 0; i < locks; i++ {
		pipe.Set(ctx, fmt.Sprintf("lock:job:%d", i), "tok", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	clk := clockwork.NewFakeClockAt(time.Now())
	began := clk.Now()
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}, ReadTimeout: 300 * time.Millisecond},
		Clock:  clk,
		// Both passes at 1,000 keys a second (the lock pass's floor): ten
		// seconds each, so that the pause finds both under way.
		Sample: exporter.SampleOptions{KeysPerSecond: 1000, MaxKeys: 1_000_000, MaxDuration: time.Minute,
			Interval: 2 * time.Minute, ScanCount: 50, Batch: 50},
		Locks: exporter.LockOptions{ScanBudget: 1e-9, ScanCount: 50},
	})

	done := make(chan *snapshot.Node, 1)
	go func() { done <- e.Sample(ctx)[0] }()
	waitForScans(t, srv.Addr, 40)
	srv.Pause()
	s := <-done // every command in flight times out
	srv.Resume()
	var se *snapshot.StageError
	if s.Up || !errors.As(s.Err, &se) || se.Class != snapshot.ClassTimeout {
		t.Fatalf("sample of a paused server: up=%v err=%v", s.Up, s.Err)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_up`: 0})

	// A sample completes at most one whole-keyspace pass: the keys scanned
	// when the first completed are those of one pass, or more if it started
	// over.
	scanned := -1.0
	scannedName := fmt.Sprintf("cachewatch_exporter_keys_scanned_total{node=%q}", srv.Addr)
	must(t, poll.Check(ctx, poll.Bound, 150*time.Millisecond, func() error {
		clk.Advance(time.Second) // past the node's backoff
		if s = e.Sample(ctx)[0]; !s.Up {
			return fmt.Errorf("down: %v", s.Err)
		}
		if scanned < 0 && s.Coverage == 1 {
			_, got := scrape(t, reg)
			scanned = got[scannedName]
		}
		if scanned < 0 || s.Pass == nil || s.Pass.LockPassEnded.IsZero() {
			return errors.New("passes not complete yet")
		}
		return nil
	}))
	if scanned != items+locks {
		t.Errorf("the whole-keyspace pass scanned %v keys, want %d: each key once", scanned, items+locks)
	}
	if !s.Pass.LockPassStarted.Equal(began) {
		t.Errorf("the lock sync completed started at %v, want the one started before the pause, at %v", s.Pass.LockPassStarted, began)
	}
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_keys_sampled{key_group="item:*"}`:   items,
		`cachewatch_exporter_locks_held{key_group="lock:job:*"}`: locks,
		`cachewatch_exporter_lock_notifications`:                 1,
		`cachewatch_exporter_up`:                                 1,
	})
	timeouts := 0.0
	for k, v := range got {
		if strings.HasPrefix(k, "cachewatch_exporter_sample_errors_total{") && strings.Contains(k, `class="timeout"`) {
			timeouts += v
		}
	}
	if timeouts < 1 {
		t.Errorf("sample_errors_total{class=\"timeout\"} = %v, want the timeout counted", timeouts)
	}
}
