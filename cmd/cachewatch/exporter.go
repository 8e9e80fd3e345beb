package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/cachewatch/cachewatch/exporter"
)

// defaultListen is the exporter's default port.
const defaultListen = ":9643"

func init() {
	register(command{name: "exporter", help: "Serve Prometheus metrics sampled from a live Redis or Cluster.", define: defineExporter})
}

// exporterFlags are the exporter command's flags beyond the shared Redis ones.
type exporterFlags struct {
	redis     redisFlags
	web       *web.FlagConfig
	path      string
	interval  time.Duration
	longHeld  time.Duration
	missBurst uint64
}

func defineExporter(cmd *kingpin.CmdClause) action {
	f := &exporterFlags{}
	f.redis.register(cmd)
	f.web = kingpinflag.AddFlags(cmd, defaultListen)
	cmd.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.path)
	cmd.Flag("sample.interval", "Time between samples.").Default(exporter.DefaultInterval.String()).DurationVar(&f.interval)
	cmd.Flag("locks.long-held", "Owner token unchanged this long makes a lock long-held.").
		Default(exporter.DefaultLongHeld.String()).DurationVar(&f.longHeld)
	cmd.Flag("server.miss-burst", "Count a miss burst when server misses grow by this much in one sample (0: off).").
		Default("0").Uint64Var(&f.missBurst)
	return f.run
}

// validate checks what kingpin cannot: ranges and cross-flag rules.
func (f *exporterFlags) validate() (exporter.Options, error) {
	opts, err := f.redis.options()
	if err != nil {
		return opts, err
	}
	switch {
	case f.interval <= 0:
		return opts, fmt.Errorf("--sample.interval must be positive, got %s", f.interval)
	case f.longHeld <= 0:
		return opts, fmt.Errorf("--locks.long-held must be positive, got %s", f.longHeld)
	case !strings.HasPrefix(f.path, "/"):
		return opts, fmt.Errorf("--web.telemetry-path %q must start with /", f.path)
	}
	if !*f.web.WebSystemdSocket {
		for _, a := range *f.web.WebListenAddresses {
			if err := checkHostPort(strings.TrimPrefix(a, "vsock://")); err != nil {
				return opts, fmt.Errorf("--web.listen-address %q: %w", a, err)
			}
		}
	}
	if *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return opts, fmt.Errorf("--web.config.file: %w", err)
		}
	}
	opts.Interval, opts.LongHeld, opts.MissBurst = f.interval, f.longHeld, f.missBurst
	return opts, nil
}

func (f *exporterFlags) run(ctx context.Context, c *cli) int {
	opts, err := f.validate()
	if err != nil {
		return c.usageError(err)
	}
	opts.Logger = c.logger
	e, err := exporter.New(opts)
	if err != nil {
		return c.usageError(err)
	}
	return f.serve(ctx, e, c.logger)
}

func (f *exporterFlags) serve(ctx context.Context, e *exporter.Exporter, logger *slog.Logger) int {
	reg := prometheus.NewRegistry()
	reg.MustRegister(e, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle(f.path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	if f.path != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "cachewatch exporter",
			Description: "Lock, keyspace expiry, script and queue state sampled from Redis",
			Version:     versionString(),
			Links:       []web.LandingLinks{{Address: f.path, Text: "Metrics"}},
		})
		if err != nil {
			logger.Error("landing page", "err", err)
			return 1
		}
		mux.Handle("/", landing)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan struct{})
	go func() { defer close(sampled); _ = e.Run(ctx) }()

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- web.ListenAndServe(srv, f.web, logger) }()
	code := 0
	select {
	case err := <-served:
		logger.Error("http server", "err", err)
		code = 1
	case <-ctx.Done():
		shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(shutdown)
		stop()
	}
	cancel()
	<-sampled
	return code
}
