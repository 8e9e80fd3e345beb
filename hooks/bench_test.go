package hooks_test

import (
	"bufio"
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

	"github.com/cachewatch/cachewatch/hooks"
)

// BenchmarkHookOverhead measures what the hook adds per command, in process
// and without a network: go-redis dials a stub (one end of a net.Pipe, the
// other answered by a goroutine speaking just enough RESP). The stub is a
// benchmark fixture: no behaviour is tested against it.
//
//	go test -run '^$' -bench HookOverhead -benchmem ./hooks
func BenchmarkHookOverhead(b *testing.B) {
	release := hooks.LockLibraryScripts()[2] // redislock_release: reply 1 means released
	sha := redis.NewScript(release.Src).Hash()
	cases := []struct {
		name string
		cmds int // commands per op
		run  func(ctx context.Context, rdb *redis.Client) error
	}{
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
	newClient := func(b *testing.B, hooked bool) *redis.Client {
		rdb := stubClient(b)
		if hooked {
			h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			rdb.AddHook(h)
		}
		return rdb
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			warm := func(b *testing.B, rdb *redis.Client) { // connect, create the metric children
				for i := 0; i < 100; i++ {
					if err := c.run(ctx, rdb); err != nil {
						b.Fatal(err)
					}
				}
			}
			for _, hooked := range []bool{false, true} {
				name := "bare"
				if hooked {
					name = "hooked"
				}
				b.Run(name, func(b *testing.B) {
					rdb := newClient(b, hooked)
					warm(b, rdb)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := c.run(ctx, rdb); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			// The machine's background load moves bare and hooked runs by
			// more than the hook costs; alternating them op by op and
			// comparing median op times cancels most of it.
			b.Run("interleaved", func(b *testing.B) {
				bare, hooked := newClient(b, false), newClient(b, true)
				warm(b, bare)
				warm(b, hooked)
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
			})
		})
	}
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

// stubRESP answers RESP commands until the connection closes: GET with a
// value, EVALSHA with 1, HELLO with an error, anything else with OK. Replies are flushed when no
// more input is buffered, so a pipeline is answered in one write.
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
		switch string(name[:n]) {
		case "get", "GET":
			w.WriteString("$5\r\nhello\r\n")
		case "hello", "HELLO": // RESP2 only: go-redis falls back
			w.WriteString("-ERR unknown command 'hello'\r\n")
		case "evalsha", "EVALSHA":
			w.WriteString(":1\r\n")
		default:
			w.WriteString("+OK\r\n")
		}
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
