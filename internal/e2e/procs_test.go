package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/internal/childproc"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

const howToRun = "install the Debian packages redis-server, prometheus and prometheus-alertmanager " +
	"(scripts/test.sh does, as root); set " + redistest.RequireEnv + "=1 to make this a failure"

// binaries are the external programs the test runs.
type binaries struct {
	prometheus, alertmanager string
}

// findBinaries returns the Prometheus and Alertmanager binaries, or skips t
// (fails it with CACHEWATCH_REQUIRE_REDIS=1) when one is missing.
// redis-server is checked by redistest.
func findBinaries(t *testing.T) binaries {
	t.Helper()
	var b binaries
	var missing []string
	for _, c := range []struct {
		dst   *string
		names []string
	}{
		{&b.prometheus, []string{"prometheus"}},
		{&b.alertmanager, []string{"prometheus-alertmanager", "alertmanager"}}, // Debian's name, upstream's
	} {
		for _, n := range c.names {
			if p, err := exec.LookPath(n); err == nil {
				*c.dst = p
				break
			}
		}
		if *c.dst == "" {
			missing = append(missing, c.names[0])
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing = append(missing, "redis-server")
	}
	if len(missing) > 0 {
		why := "e2e: " + strings.Join(missing, ", ") + " not found in PATH"
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatalf("%s, and %s=1 requires them", why, redistest.RequireEnv)
		}
		t.Skipf("%s; %s", why, howToRun)
	}
	return b
}

// process is an external program owned by the test, its output in a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startOnFreePort starts bin with the arguments args(port) for a free
// loopback port and waits until ready(port) succeeds. Another program may
// take the port between the probe and the start, so a start whose program
// exits before it is ready is tried again on a new port. The program is
// stopped (SIGTERM, then SIGKILL) when the test ends.
func startOnFreePort(t *testing.T, name, bin string, args func(port int) []string, ready func(port int) error) (*process, int) {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := &process{name: name, log: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, try)), done: make(chan struct{})}
		f, err := os.Create(p.log)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.cmd = exec.Command(bin, args(port)...)
		p.cmd.Stdout, p.cmd.Stderr = f, f
		if err := childproc.Start(p.cmd); err != nil { // dies with the test binary
			f.Close()
			t.Fatalf("%s: start %s: %v", name, bin, err)
		}
		go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
		if lastErr = waitReady(p, port, ready); lastErr == nil {
			t.Cleanup(p.stop)
			return p, port
		}
		p.stop()
		t.Logf("%s on port %d: %v; log:\n%s", name, port, lastErr, p.tail())
	}
	t.Fatalf("%s: could not start: %v", name, lastErr)
	return nil, 0
}

// waitReady polls ready every 100ms for up to 60s (a loaded 2-core machine
// starts Prometheus slowly), giving up early if the program exits.
func waitReady(p *process, port int, ready func(int) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ready(port)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready (%v)", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 60s: %w", err)
		}
	}
}

func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the end of the program's log, for failure messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// alive fails t with the program's log if it has exited.
func (p *process) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited: %v; log:\n%s", p.name, p.cmd.ProcessState, p.tail())
	default:
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// httpOK is a readiness probe: GET url answers 200.
func httpOK(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// writeJSON writes v as JSON, which Prometheus and Alertmanager read as the
// YAML it is a subset of.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildCachewatch builds the cachewatch command into dir and returns its path.
func buildCachewatch(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "cachewatch")
	cmd := exec.Command(goTool(), "build", "-o", bin, "github.com/cachewatch/cachewatch/cmd/cachewatch")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build cmd/cachewatch: %v\n%s", err, out.String())
	}
	return bin
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
