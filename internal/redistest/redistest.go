// Package redistest starts real, throwaway Redis servers and Clusters for
// tests, and lets tests pause, kill and restart them.
//
// Nothing here imitates Redis: what NX, PX, Lua, SCAN and INFO decide is
// decided by a real redis-server. On a machine without redis-server the tests
// that need one skip with a message saying how to run them; with
// CACHEWATCH_REQUIRE_REDIS=1 (set by .ci/run) they fail instead, so CI can
// never pass by skipping.
package redistest

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/childproc"
)

// RequireEnv is the variable that turns a missing Redis into a test failure.
const RequireEnv = "CACHEWATCH_REQUIRE_REDIS"

// AddrEnv names an already running Redis that Shared uses instead of starting
// one. Tests that pause or kill a server always start their own.
const AddrEnv = "REDIS_ADDR"

const howToRun = "install redis-server (apt-get install redis-server) or set REDIS_ADDR; " +
	"set " + RequireEnv + "=1 to make this a failure"

// unavailable skips t, or fails it when RequireEnv is set.
func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("redistest: %s, and %s=1 requires Redis", why, RequireEnv)
	}
	t.Skipf("redistest: %s; %s", why, howToRun)
}

// Binary returns the path of redis-server, or skips/fails t without it.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not found in PATH")
	}
	return path
}

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port, for go-redis Options.Addr.
	Addr string
	Port int

	t    testing.TB
	bin  string
	dir  string
	args []string
	argv []string // full command line of the last start, reused by Restart
	cmd  *exec.Cmd
	done chan struct{}
	// A TLS-only server (StartTLS): the CA clients trust, and the server's
	// certificate, key and CA files.
	tlsCA    *x509.CertPool
	tlsFiles [3]string
}

// Start runs a new redis-server on a free loopback port, with persistence
// off and the extra arguments given (e.g. "--maxmemory-policy", "allkeys-lfu").
// It is stopped when the test ends, and killed with the test binary if that
// is killed first (internal/childproc).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return launch(t, "", func(s *Server) { s.args = args })
}

// launch starts a server on a free loopback port for t, stopped when t
// ends; setup fills in the Server's options. kind names it in the error
// ("", "with TLS").
func launch(t testing.TB, kind string, setup func(s *Server)) *Server {
	t.Helper()
	s, err := startIn(Binary(t), t.TempDir(), setup)
	if err != nil {
		t.Fatalf("redistest: could not start redis-server%s: %v", kind, err)
	}
	s.t = t
	t.Cleanup(s.stop)
	return s
}

// startIn starts a server with its files in dir on a free loopback port,
// trying another port when the one picked was taken meanwhile.
func startIn(bin, dir string, setup func(s *Server)) (*Server, error) {
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{bin: bin, dir: dir, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		setup(s)
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *Server) start() error {
	if s.argv != nil { // a sentinel: its own argument order
		return s.startWith(s.argv)
	}
	return s.startWith(append(s.baseArgs(), s.args...))
}

// baseArgs are the options every server gets: loopback only, no persistence,
// a log file in the test's directory.
func (s *Server) baseArgs() []string {
	port := []string{"--port", strconv.Itoa(s.Port)}
	if s.tlsCA != nil {
		port = s.tlsArgs()
	}
	return append(port,
		"--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)),
		"--enable-debug-command", "local",
	)
}

func (s *Server) startWith(argv []string) error {
	s.argv = argv
	cmd := exec.Command(s.bin, argv...)
	if err := childproc.Start(cmd); err != nil { // dies with the test binary
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	if err := waitPing(s.pingOptions(), done, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)))
		return fmt.Errorf("%w; log:\n%s", err, tail(log, 2000))
	}
	return nil
}

// stop resumes (a stopped process cannot die of SIGKILL until continued on
// some kernels' accounting) and kills the server.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server process (SIGSTOP): connections stay open but nothing
// is answered, as with a server stalled by a long fork or a slow disk.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("redistest: signal %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

// Kill ends the server at once (SIGKILL); its data is gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.stop()
}

// Restart kills the server if it runs and starts it again on the same port,
// empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.stop()
	var err error
	for try := 0; try < 20; try++ { // the port may linger briefly after a kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.Port, err)
}

// Client returns a go-redis client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	return NewClient(t, &redis.Options{Addr: s.Addr, TLSConfig: s.ClientTLS()})
}

// NewClient returns a client for opts, closed when the test ends.
func NewClient(t testing.TB, opts *redis.Options) *redis.Client {
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// OtherClients counts the connections to the server c talks to, less
// those named except: the test names its own clients (redis.Options
// ClientName) and counts those of the program under test.
func OtherClients(t testing.TB, c *redis.Client, except string) int {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLIENT LIST: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if line != "" && !strings.Contains(line, " name="+except+" ") {
			n++
		}
	}
	return n
}

// Shared returns the address of a Redis the test may use but must not pause
// or kill, and whose keyspace it must not assume empty: REDIS_ADDR when set
// and reachable, otherwise a new server of the test's own.
func Shared(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(AddrEnv); addr != "" {
		if err := answers(addr); err != nil {
			unavailable(t, err.Error())
		}
		return addr
	}
	return Start(t).Addr
}

// answers waits up to 2s for the Redis that REDIS_ADDR names (addr) to
// answer PING.
func answers(addr string) error {
	if err := waitPing(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond}, nil, 2*time.Second); err != nil {
		return fmt.Errorf("%s=%s does not answer: %w", AddrEnv, addr, err)
	}
	return nil
}

// waitPing waits until the server of opts answers PING, the process ends
// (done closed), or the timeout passes.
func waitPing(opts *redis.Options, done <-chan struct{}, timeout time.Duration) error {
	addr := opts.Addr
	c := redis.NewClient(opts)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redis-server on %s exited", addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis on %s did not answer PING in %v: %w", addr, timeout, err)
}

// freePort returns a loopback port that was free a moment ago. With bus set,
// port+10000 (the cluster bus) must be free as well.
func freePort(bus bool) (int, error) {
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err == nil {
			l2.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port pair found")
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
