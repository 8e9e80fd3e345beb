package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/probe"
)

// defaultListen is the exporter's default port.
const defaultListen = ":9643"

func init() {
	register(command{name: "exporter", help: "Serve Prometheus metrics sampled from a live Redis or Cluster.", define: defineExporter})
}

// exporterFlags are the exporter command's flags beyond the shared Redis ones.
type exporterFlags struct {
	redis         redisFlags
	web           *web.FlagConfig
	path          string
	interval      time.Duration
	longHeld      time.Duration
	reconcile     time.Duration
	notifications string
	targetsFile   string
	missBurst     uint64
	probe         probeFlags
}

func defineExporter(cmd *kingpin.CmdClause) action {
	f := &exporterFlags{}
	f.redis.register(cmd)
	f.web = kingpinflag.AddFlags(cmd, defaultListen)
	cmd.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.path)
	cmd.Flag("sample.interval", "Time between samples.").Default(exporterDefaults.Sample.Interval.String()).DurationVar(&f.interval)
	cmd.Flag("locks.long-held", "Owner token unchanged this long makes a lock long-held.").
		Default(exporterDefaults.Locks.LongHeld.String()).DurationVar(&f.longHeld)
	cmd.Flag("server.miss-burst", "Count a miss burst when server misses grow by this much in one sample (0: off).").
		Default("0").Uint64Var(&f.missBurst)
	cmd.Flag("locks.notifications", "Follow lock keys through keyspace notifications: auto (CONFIG SET the missing classes when allowed, put back on exit), existing (only when the server publishes them), enable (CONFIG SET them and leave them on), or off.").
		Default(string(exporter.NotifyAuto)).EnumVar(&f.notifications, notifyModes()...)
	cmd.Flag("locks.reconcile", "With notifications, time over which a SCAN pass reconciles the lock index.").
		Default(exporterDefaults.Locks.Reconcile.String()).DurationVar(&f.reconcile)
	cmd.Flag("targets.file", "YAML file of Redis targets, each with its own credentials, sampled apart and labelled target (instead of --redis.*).").
		PlaceHolder("FILE").StringVar(&f.targetsFile)
	f.probe.register(cmd)
	return f.run
}

// exporterDefaults are the exporter's defaults, shown as the flags'.
var exporterDefaults = exporter.DefaultOptions()

// notifyModes are the values of --locks.notifications, the default first.
func notifyModes() []string {
	return []string{string(exporter.NotifyAuto), string(exporter.NotifyExisting), string(exporter.NotifyEnable), string(exporter.NotifyOff)}
}

// validate checks what kingpin cannot: ranges and cross-flag rules. It
// returns the options of every target: the --redis.* one, or those of
// --targets.file.
func (f *exporterFlags) validate() ([]exporter.Options, error) {
	switch {
	case f.interval <= 0:
		return nil, fmt.Errorf("--sample.interval must be positive, got %s", f.interval)
	case f.redis.maxDurationSet && f.redis.maxDuration > f.interval*9/10:
		return nil, fmt.Errorf("--sample.max-duration %s must be at most 90%% of --sample.interval %s", f.redis.maxDuration, f.interval)
	case f.longHeld <= 0:
		return nil, fmt.Errorf("--locks.long-held must be positive, got %s", f.longHeld)
	case f.reconcile <= 0:
		return nil, fmt.Errorf("--locks.reconcile must be positive, got %s", f.reconcile)
	case !strings.HasPrefix(f.path, "/"):
		return nil, fmt.Errorf("--web.telemetry-path %q must start with /", f.path)
	}
	if err := f.validateWeb(); err != nil {
		return nil, err
	}
	if f.probe.modulesFile != "" {
		return nil, nil // no target of its own: the probed ones (probeSampling)
	}
	all, err := f.targets()
	if err != nil {
		return nil, err
	}
	mode := exporter.NotifyMode(f.notifications) // kingpin checked the value
	for i := range all {
		all[i].Sample.Interval, all[i].Locks.LongHeld, all[i].MissBurst = f.interval, f.longHeld, f.missBurst
		all[i].Locks.Notifications, all[i].Locks.Reconcile = mode, f.reconcile
	}
	return all, nil
}

// targets returns the options of the --redis.* target, or of every target
// of --targets.file.
func (f *exporterFlags) targets() ([]exporter.Options, error) {
	if f.targetsFile == "" {
		opts, err := f.redis.options()
		return []exporter.Options{opts}, err
	}
	if f.redis.connectionSet() {
		return nil, errors.New("--targets.file and --redis.* connection flags: set targets in one place")
	}
	return readTargets(f.targetsFile, f.redis)
}

// listen binds every --web.listen-address; nil when exporter-toolkit
// must find the sockets itself (systemd activation, vsock).
func (f *exporterFlags) listen() ([]net.Listener, error) {
	if *f.web.WebSystemdSocket {
		return nil, nil
	}
	var out []net.Listener
	for _, a := range *f.web.WebListenAddresses {
		if strings.HasPrefix(a, "vsock://") {
			closeAll(out)
			return nil, nil
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

// validateWeb checks the listen addresses and the web config file.
func (f *exporterFlags) validateWeb() error {
	if !*f.web.WebSystemdSocket {
		for _, a := range *f.web.WebListenAddresses {
			if err := checkHostPort(strings.TrimPrefix(a, "vsock://")); err != nil {
				return fmt.Errorf("--web.listen-address %q: %w", a, err)
			}
		}
	}
	if *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return fmt.Errorf("--web.config.file: %w", err)
		}
	}
	return nil
}

func (f *exporterFlags) run(ctx context.Context, c *cli) int {
	f.redis.setLogger(c.logger)
	all, err := f.validate()
	if err != nil {
		return c.usageError(err)
	}
	exporters := make([]*exporter.Exporter, 0, len(all))
	for _, opts := range all {
		opts.Logger = c.logger
		if opts.Name != "" {
			opts.Logger = c.logger.With("target", opts.Name)
		}
		e, err := exporter.New(opts)
		if err != nil {
			return c.usageError(err)
		}
		exporters = append(exporters, e)
	}
	prober, err := f.prober(c.logger)
	if err != nil {
		return c.usageError(err)
	}
	return f.serve(ctx, exporters, prober, c.logger)
}

// serve samples every target in the background and serves their last
// samples until ctx is done.
func (f *exporterFlags) serve(ctx context.Context, exporters []*exporter.Exporter, prober *probe.Prober, logger *slog.Logger) int {
	mux, ok := f.handler(exporters, prober, logger)
	if !ok {
		return 1
	}
	// Bind first: a taken port is reported alone, before any sampling
	// starts (and would have to be cancelled, with errors of its own).
	listeners, err := f.listen()
	if err != nil {
		logger.Error("http server", "err", err)
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sampled sync.WaitGroup
	for _, e := range exporters {
		sampled.Go(func() { _ = e.Run(ctx) })
	}
	if prober != nil {
		sampled.Go(func() { _ = prober.Run(ctx) })
	}

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() {
		if listeners == nil { // systemd sockets or vsock: exporter-toolkit finds them
			served <- web.ListenAndServe(srv, f.web, logger)
			return
		}
		served <- web.ServeMultiple(listeners, srv, f.web, logger)
	}()
	code := 0
	select {
	case err := <-served:
		logger.Error("http server", "err", err)
		code = 1
	case <-ctx.Done():
		shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(shutdown)
		stop()
		<-served // the server's goroutine logs nothing once the command has returned
	}
	cancel()
	sampled.Wait()
	return code
}

// handler registers the exporters and serves the metrics path, the probe
// path with a prober, and a landing page; an error is logged and reported
// as false.
func (f *exporterFlags) handler(exporters []*exporter.Exporter, prober *probe.Prober, logger *slog.Logger) (*http.ServeMux, bool) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, e := range exporters {
		if err := reg.Register(e); err != nil {
			logger.Error("register target", "err", err)
			return nil, false
		}
	}
	mux := http.NewServeMux()
	links := []web.LandingLinks{{Address: f.path, Text: "Metrics"}}
	if prober != nil {
		reg.MustRegister(prober)
		mux.Handle(probePath, prober)
		links = append(links, web.LandingLinks{Address: probePath + "?target=redis://localhost:6379", Text: "Probe"})
	}
	mux.Handle(f.path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	if f.path != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "cachewatch exporter",
			Description: "Lock, keyspace expiry, script and queue state sampled from Redis",
			Version:     versionString(),
			Links:       links,
			Profiling:   "false", // no /debug/pprof handlers are served

		})
		if err != nil {
			logger.Error("landing page", "err", err)
			return nil, false
		}
		mux.Handle("/", landing)
	}
	return mux, true
}
