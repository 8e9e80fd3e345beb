package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/term"

	"github.com/cachewatch/cachewatch/cmd/cachewatch/demo"
	"github.com/cachewatch/cachewatch/exporter"
)

// exitRedisUnreachable is the demo's status when --redis cannot be reached.
const exitRedisUnreachable = 3

func init() {
	register(command{name: "demo", help: "Watch a cache stampede happen, then get fixed by cachewatch (needs nothing but Go).", define: defineDemo})
}

type demoFlags struct {
	redisURL, format, reportFile, listen, phase string
	duration                                    time.Duration
	instances, callers, keys                    int
}

func defineDemo(cmd *kingpin.CmdClause) action {
	f := &demoFlags{}
	cmd.Flag("redis", "Redis URL redis://[user@]host:port[/db] to run against (password in $"+PasswordEnv+"); default an embedded miniredis.").
		PlaceHolder("URL").StringVar(&f.redisURL)
	cmd.Flag("duration", "Length of the whole run, both phases.").Default(demo.DefaultDuration.String()).DurationVar(&f.duration)
	cmd.Flag("phase", "Run one phase only, for the whole duration: "+demo.PhaseUnprotected+" or "+demo.PhaseCachewatch+" (default both, half the duration each).").
		PlaceHolder("PHASE").EnumVar(&f.phase, demo.PhaseUnprotected, demo.PhaseCachewatch)
	cmd.Flag("instances", "Simulated service instances.").Default(strconv.Itoa(demo.DefaultInstances)).IntVar(&f.instances)
	cmd.Flag("callers", "Concurrent callers per instance.").Default(strconv.Itoa(demo.DefaultCallers)).IntVar(&f.callers)
	cmd.Flag("keys", "Hot keys.").Default(strconv.Itoa(demo.DefaultKeys)).IntVar(&f.keys)
	cmd.Flag("format", "Report format on stdout: text or json.").Default("text").EnumVar(&f.format, "text", "json")
	cmd.Flag("report", "Also write a self-contained HTML report with charts to this file.").PlaceHolder("FILE.html").StringVar(&f.reportFile)
	cmd.Flag("web.listen-address", "Address to serve /metrics on while the demo runs (default a free loopback port).").
		Default("127.0.0.1:0").StringVar(&f.listen)
	return f.run
}

// validate checks what kingpin cannot: ranges.
func (f *demoFlags) validate() error {
	switch {
	case f.instances < 1 || f.callers < 1 || f.keys < 1:
		return errors.New("--instances, --callers and --keys must be at least 1")
	case f.reportFile != "" && strings.HasSuffix(f.reportFile, string(os.PathSeparator)):
		return fmt.Errorf("--report %q: want a file name", f.reportFile)
	}
	return nil
}

func (f *demoFlags) run(ctx context.Context, c *cli) int {
	if err := f.validate(); err != nil {
		return c.usageError(err)
	}
	// go-redis logs each failed dial itself; the demo reports the one error
	// that matters in one line, and shows go-redis's lines at debug level.
	redis.SetLogger(debugRedisLogger{c.logger})

	// With --format json, stdout carries only the JSON document.
	progressOut := c.stdout
	if f.format == "json" {
		progressOut = c.stderr
	}
	terminal, width := terminalWidth(progressOut)

	reg := prometheus.NewRegistry()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return c.usageError(fmt.Errorf("--web.listen-address: %w", err))
	}
	srv := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	opts := demo.Options{
		RedisURL: f.redisURL, Password: os.Getenv(PasswordEnv), Duration: f.duration, Phase: f.phase,
		Instances: f.instances, Callers: f.callers, Keys: f.keys, Registry: reg,
		Announce: f.announce(progressOut, ln.Addr()),
		Progress: demo.ProgressPrinter(progressOut, terminal, width),
	}
	report, err := demo.Run(ctx, opts)
	demo.EndProgress(progressOut, terminal)
	switch {
	case errors.Is(err, exporter.ErrPasswordInURL):
		return c.usageError(fmt.Errorf("%w: use $%s", err, PasswordEnv))
	case errors.Is(err, demo.ErrBadOptions):
		return c.usageError(err)
	case err != nil:
		fmt.Fprintf(c.stderr, "cachewatch demo: error: %s\n", redactErr(err))
		if errors.Is(err, demo.ErrRedisUnreachable) {
			return exitRedisUnreachable
		}
		return 1
	}
	if err := writeDemoReport(report, f, c.stdout); err != nil {
		fmt.Fprintf(c.stderr, "cachewatch demo: error: %s\n", err)
		return 1
	}
	if f.reportFile != "" {
		fmt.Fprintf(progressOut, "HTML report: %s\n", f.reportFile)
	}
	return 0
}

// announce returns what the demo prints once connected: the server, the
// metrics address, the command that lists its locks and what it will run.
func (f *demoFlags) announce(out io.Writer, metrics net.Addr) func(server, url string) {
	return func(server, url string) {
		fmt.Fprintf(out, "cachewatch demo on %s\n", server)
		fmt.Fprintf(out, "metrics: http://%s/metrics (Prometheus can scrape it while the demo runs)\n", metrics)
		password := ""
		if os.Getenv(PasswordEnv) != "" {
			password = " ($" + PasswordEnv + " set there too)"
		}
		fmt.Fprintf(out, "locks: who holds each lock, from another terminal%s:\n  %s\n", password, demoLocksCommand(url))
		if f.phase != "" {
			fmt.Fprintf(out, "running %v, %s only\n", f.duration, f.phase)
		} else {
			fmt.Fprintf(out, "running %v: %v unprotected, then %v on cachewatch\n", f.duration, f.duration/2, f.duration/2)
		}
		if w := demo.ShortRunWarning(f.duration, f.phase); w != "" {
			fmt.Fprintln(out, w)
		}
	}
}

// demoLocksRefresh is the refresh of the locks command the demo prints:
// the job's lock lives at most 300 ms at a time, so a listing every 2 s
// (the default) catches it only now and then; every 200 ms its TTL is seen
// running out.
const demoLocksRefresh = 200 * time.Millisecond

// demoLocksCommand is the cachewatch locks command that lists the demo's
// locks on the Redis at url, as a shell line: the demo's client is a
// standalone one (miniredis cannot say whether it is a Cluster), and its
// locks are not under the default pattern.
func demoLocksCommand(url string) string {
	words := []string{"cachewatch", "locks", "--redis.url", url, "--redis.mode", "standalone",
		"--locks.pattern", demo.LockPattern, "--refresh", demoLocksRefresh.String()}
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// shellQuote quotes w for a POSIX shell unless it needs no quoting.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func writeDemoReport(r *demo.Report, f *demoFlags, stdout io.Writer) error {
	if f.reportFile != "" {
		out, err := os.Create(f.reportFile)
		if err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		if err := r.WriteHTML(out); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	if f.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteText(stdout)
}

func metricsMux(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// terminalWidth reports whether w is a terminal, where progress rewrites
// one line in place, and its width in columns (0 when unknown).
func terminalWidth(w io.Writer) (terminal bool, width int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return true, 0
	}
	return true, width
}

// debugRedisLogger shows go-redis's own log lines at debug level only,
// redacted like every other line.
type debugRedisLogger struct{ l *slog.Logger }

func (r debugRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, redact(strings.TrimSpace(fmt.Sprintf(format, v...))), "component", "go-redis")
}
