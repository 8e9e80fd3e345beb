package hooks_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cachewatch/cachewatch/hooks"
)

// BenchmarkHookOverhead measures what the hook adds per command, in process
// and without a network: go-redis dials a stub (one end of a net.Pipe, the
// other answered by a goroutine speaking just enough RESP). The stub is a
// benchmark fixture: no behaviour is tested against it.
//
//	go test -run '^$' -bench HookOverhead -benchmem ./hooks
func BenchmarkHookOverhead(b *testing.B) {
	for _, c := range overheadCases() {
		b.Run(c.name, func(b *testing.B) {
			for _, mode := range []string{"bare", "hooked", "meter"} {
				b.Run(mode, func(b *testing.B) { c.measure(b, hookedAs(b, stubClient(b), mode)) })
			}
			b.Run("interleaved", func(b *testing.B) {
				c.interleaved(b, hookedAs(b, stubClient(b), "bare"), hookedAs(b, stubClient(b), "hooked"))
			})
			b.Run("interleaved_meter", func(b *testing.B) {
				c.interleaved(b, hookedAs(b, stubClient(b), "bare"), hookedAs(b, stubClient(b), "meter"))
			})
			// The stub answers from another goroutine, so each op hands off
			// between goroutines twice, and how long the hook takes can
			// change whether the other side is still spinning or already
			// parked. A connection answering inline, in the caller's
			// goroutine, has no handoff.
			b.Run("interleaved_inline", func(b *testing.B) {
				c.interleaved(b, hookedAs(b, inlineClient(b), "bare"), hookedAs(b, inlineClient(b), "hooked"))
			})
		})
	}
}

// overheadCase is one operation of BenchmarkHookOverhead.
type overheadCase struct {
	name string
	cmds int // commands per op
	run  func(ctx context.Context, rdb *redis.Client) error
}

// overheadCases are the operations measured: a lookup, a lock acquire, a
// lock release by script, and a pipeline.
func overheadCases() []overheadCase {
	release := hooks.LockLibraryScripts()[2] // redislock_release: reply 1 means released
	sha := redis.NewScript(release.Src).Hash()
	return []overheadCase{
		{"GET", 1, func(ctx context.Context, rdb *redis.Client) error { return rdb.Get(ctx, "user:1234").Err() }},
		{"SET_NX", 1, func(ctx context.Context, rdb *redis.Client) error {
			return rdb.SetNX(ctx, "lock:order:1234", "tok-8f3a9c0e", 10*time.Second).Err()
		}},
		{"EVALSHA", 1, func(ctx context.Context, rdb *redis.Client) error {
			return rdb.EvalSha(ctx, sha, []string{"lock:order:1234"}, "tok-8f3a9c0e").Err()
		}},
		{"pipeline100", 100, func(ctx context.Context, rdb *redis.Client) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := 0; i < 100; i++ {
					p.Get(ctx, "user:1234")
				}
				return nil
			})
			return err
		}},
	}
}

// hookedAs returns rdb as the mode measures it: "bare", "hooked" (the
// Prometheus pipeline) or "meter" (both pipelines: Prometheus and an
// OpenTelemetry SDK).
func hookedAs(b *testing.B, rdb *redis.Client, mode string) *redis.Client {
	if mode == "bare" {
		return rdb
	}
	opts := hooks.Options{Registerer: prometheus.NewRegistry()}
	if mode == "meter" {
		opts.MeterProvider = benchMeterProvider(b)
	}
	h, err := hooks.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	rdb.AddHook(h)
	return rdb
}

// warm connects rdb and creates the metric children.
func (c overheadCase) warm(b *testing.B, rdb *redis.Client) {
	for i := 0; i < 100; i++ {
		if err := c.run(context.Background(), rdb); err != nil {
			b.Fatal(err)
		}
	}
}

// measure times the operation on rdb alone.
func (c overheadCase) measure(b *testing.B, rdb *redis.Client) {
	ctx := context.Background()
	c.warm(b, rdb)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.run(ctx, rdb); err != nil {
			b.Fatal(err)
		}
	}
}

// interleaved reports what hooked adds per command over bare. The machine's
// background load moves bare and hooked runs by more than the hook costs;
// alternating them op by op and comparing median op times cancels most of
// it.
func (c overheadCase) interleaved(b *testing.B, bare, hooked *redis.Client) {
	ctx := context.Background()
	c.warm(b, bare)
	c.warm(b, hooked)
	tBare, tHooked := make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first, second, tFirst, tSecond := bare, hooked, tBare, tHooked
		if i%2 == 1 { // alternate the order: neither always goes first
			first, second, tFirst, tSecond = hooked, bare, tHooked, tBare
		}
		t0 := time.Now()
		err1 := c.run(ctx, first)
		t1 := time.Now()
		err2 := c.run(ctx, second)
		tSecond[i], tFirst[i] = time.Since(t1), t1.Sub(t0)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
	}
	b.StopTimer()
	mBare, mHooked := median(tBare), median(tHooked)
	b.ReportMetric(float64(mHooked-mBare)/float64(c.cmds), "added-ns/cmd")
	b.ReportMetric(float64(mBare)/float64(mHooked), "x-bare-throughput")
}

// benchMeterProvider is an OpenTelemetry SDK MeterProvider with a reader
// that is never collected: what recording costs, without exporting.
func benchMeterProvider(b testing.TB) *sdkmetric.MeterProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// median sorts d and returns its middle value.
func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// stubClient returns a client whose connections are net.Pipes to stubRESP.
func stubClient(b *testing.B) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: "stub:6379", Protocol: 2, DisableIdentity: true, PoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			client, server := net.Pipe()
			go stubRESP(server)
			return client, nil
		},
	})
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// inlineClient returns a client whose connections are inlineConns.
func inlineClient(b *testing.B) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: "inline:6379", Protocol: 2, DisableIdentity: true, PoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return &inlineConn{}, nil
		},
	})
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// inlineConn is a net.Conn that answers each complete RESP command written
// to it at once, in the writer's goroutine, with stubReply's reply; Read
// returns the replies. One goroutine at a time uses it (PoolSize 1).
type inlineConn struct {
	in  []byte // bytes written and not yet parsed: at most a partial command
	out []byte // replies not yet read
}

func (c *inlineConn) Write(p []byte) (int, error) {
	c.in = append(c.in, p...)
	done := 0
	for {
		name, n := parseCommand(c.in[done:])
		if n == 0 {
			break
		}
		c.out = append(c.out, stubReply(name)...)
		done += n
	}
	c.in = c.in[:copy(c.in, c.in[done:])]
	return len(p), nil
}

func (c *inlineConn) Read(p []byte) (int, error) {
	if len(c.out) == 0 {
		return 0, io.ErrNoProgress // go-redis read before it wrote
	}
	n := copy(p, c.out)
	c.out = c.out[:copy(c.out, c.out[n:])]
	return n, nil
}

func (c *inlineConn) Close() error                     { return nil }
func (c *inlineConn) LocalAddr() net.Addr              { return inlineAddr{} }
func (c *inlineConn) RemoteAddr() net.Addr             { return inlineAddr{} }
func (c *inlineConn) SetDeadline(time.Time) error      { return nil }
func (c *inlineConn) SetReadDeadline(time.Time) error  { return nil }
func (c *inlineConn) SetWriteDeadline(time.Time) error { return nil }

type inlineAddr struct{}

func (inlineAddr) Network() string { return "inline" }
func (inlineAddr) String() string  { return "inline:6379" }

// parseCommand parses one RESP array of bulk strings at the start of buf and
// returns its first element and the command's length, 0 when buf does not
// hold a whole command.
func parseCommand(buf []byte) (name []byte, n int) {
	line, rest, ok := bytes.Cut(buf, []byte("\r\n"))
	if !ok || len(line) < 2 || line[0] != '*' {
		return nil, 0
	}
	args := atoi(line[1:])
	for i := 0; i < args; i++ {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		if !ok || len(line) < 2 {
			return nil, 0
		}
		size := atoi(line[1:])
		if len(after) < size+2 {
			return nil, 0
		}
		if i == 0 {
			name = after[:size]
		}
		rest = after[size+2:]
	}
	return name, len(buf) - len(rest)
}

// stubReply is the stubs' reply to a command: GET gets a value, EVALSHA 1,
// HELLO an error (RESP2 only: go-redis falls back), anything else OK.
func stubReply(name []byte) string {
	switch string(name) {
	case "get", "GET":
		return "$5\r\nhello\r\n"
	case "hello", "HELLO":
		return "-ERR unknown command 'hello'\r\n"
	case "evalsha", "EVALSHA":
		return ":1\r\n"
	}
	return "+OK\r\n"
}

// stubRESP answers RESP commands with stubReply's replies until the
// connection closes. Replies are flushed when no more input is buffered, so
// a pipeline is answered in one write.
func stubRESP(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 1<<16)
	w := bufio.NewWriterSize(conn, 1<<16)
	var name [16]byte
	for {
		n, err := readCommand(r, name[:])
		if err != nil {
			return
		}
		w.WriteString(stubReply(name[:n]))
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readCommand reads one RESP array of bulk strings and copies the first
// element (the command name) into name, returning its length.
func readCommand(r *bufio.Reader, name []byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != '*' {
		return 0, fmt.Errorf("stub: not an array: %q", line)
	}
	args := atoi(line[1 : len(line)-2])
	n := 0
	for i := 0; i < args; i++ {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		size := atoi(line[1 : len(line)-2])
		if i == 0 && size <= len(name) {
			if _, err := io.ReadFull(r, name[:size]); err != nil {
				return 0, err
			}
			n = size
			if _, err := r.Discard(2); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := r.Discard(size + 2); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		n = n*10 + int(c-'0')
	}
	return n
}
