package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/term"

	"github.com/cachewatch/cachewatch/internal/demo"
)

func init() {
	register("demo", command{summary: "watch a cache stampede happen, then get fixed by cachewatch (needs nothing but Go)", run: runDemo})
}

type demoFlags struct {
	redisURL, format, reportFile, listen string
	duration                             time.Duration
	instances, callers, keys             int
}

func (f *demoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.redisURL, "redis", "", "Redis `URL` redis://[user@]host:port[/db] to run against (password in $"+PasswordEnv+"); default an embedded miniredis")
	fs.DurationVar(&f.duration, "duration", demo.DefaultDuration, "length of the whole run, both phases")
	fs.IntVar(&f.instances, "instances", demo.DefaultInstances, "simulated service instances")
	fs.IntVar(&f.callers, "callers", demo.DefaultCallers, "concurrent callers per instance")
	fs.IntVar(&f.keys, "keys", demo.DefaultKeys, "hot keys")
	fs.StringVar(&f.format, "format", "text", "report format on stdout: text or json")
	fs.StringVar(&f.reportFile, "report", "", "also write a self-contained HTML report with charts to `file`")
	fs.StringVar(&f.listen, "web.listen-address", "127.0.0.1:0", "`address` to serve /metrics on while the demo runs")
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f demoFlags
	fs := flag.NewFlagSet("cachewatch demo", flag.ContinueOnError)
	f.register(fs)
	// Parse errors get one line, not the whole usage; -h prints the usage.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: cachewatch demo [flags]")
			fs.PrintDefaults()
			return 0
		}
		return demoUsageError(stderr, err)
	}
	if fs.NArg() > 0 {
		return demoUsageError(stderr, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if f.format != "text" && f.format != "json" {
		return demoUsageError(stderr, fmt.Errorf("--format %q: want text or json", f.format))
	}
	if f.instances < 1 || f.callers < 1 || f.keys < 1 {
		return demoUsageError(stderr, errors.New("--instances, --callers and --keys must be at least 1"))
	}
	if f.reportFile != "" && strings.HasSuffix(f.reportFile, string(os.PathSeparator)) {
		return demoUsageError(stderr, fmt.Errorf("--report %q: want a file name", f.reportFile))
	}

	// With --format json, stdout carries only the JSON document.
	progressOut := stdout
	if f.format == "json" {
		progressOut = stderr
	}
	terminal := isTerminal(progressOut)

	// go-redis logs every failed dial on its own; the demo reports the
	// one error that matters in one line.
	redis.SetLogger(quietRedisLog{})

	reg := prometheus.NewRegistry()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch demo: --web.listen-address: %v\n", err)
		return 2
	}
	srv := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	opts := demo.Options{
		RedisURL: f.redisURL, Password: os.Getenv(PasswordEnv), Duration: f.duration,
		Instances: f.instances, Callers: f.callers, Keys: f.keys, Registry: reg,
		Announce: func(server string) {
			fmt.Fprintf(progressOut, "cachewatch demo on %s\n", server)
			fmt.Fprintf(progressOut, "metrics: http://%s/metrics (Prometheus can scrape it while the demo runs)\n", ln.Addr())
			fmt.Fprintf(progressOut, "running %v: %v unprotected, then %v on cachewatch\n", f.duration, f.duration/2, f.duration/2)
		},
		Progress: demo.ProgressPrinter(progressOut, terminal),
	}
	report, err := demo.Run(ctx, opts)
	demo.EndProgress(progressOut, terminal)
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch demo: %v\n", err)
		switch {
		case errors.Is(err, demo.ErrBadOptions):
			return 2
		case errors.Is(err, demo.ErrRedisUnreachable):
			return exitNoRedis
		}
		return 1
	}
	if err := writeDemoReport(report, f, stdout); err != nil {
		fmt.Fprintf(stderr, "cachewatch demo: %v\n", err)
		return 1
	}
	if f.reportFile != "" {
		fmt.Fprintf(progressOut, "HTML report: %s\n", f.reportFile)
	}
	return 0
}

func demoUsageError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "cachewatch demo: %v (see cachewatch demo -h)\n", err)
	return 2
}

func writeDemoReport(r *demo.Report, f demoFlags, stdout io.Writer) error {
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

// isTerminal reports whether w is a terminal, where progress rewrites one
// line in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// quietRedisLog drops go-redis's internal log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
