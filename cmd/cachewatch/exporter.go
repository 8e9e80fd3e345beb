package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/keygroup"
)

// PasswordEnv names the environment variable holding the Redis password.
// The password is never a flag: flags show in ps and shell history.
const PasswordEnv = "CACHEWATCH_REDIS_PASSWORD"

// defaultListen is the exporter's default port.
const defaultListen = ":9643"

func init() {
	register("exporter", command{summary: "serve Prometheus metrics sampled from a live Redis or Cluster", run: runExporter})
}

// listFlag is a repeatable flag that also splits on commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// redisFlags are the connection and sampling flags shared by exporter and doctor.
type redisFlags struct {
	url, user, passwordFile, mode      string
	addrs, lockPatterns, queues, rules listFlag
	tls, tlsSkipVerify                 bool
	tlsCA, tlsServerName               string
	maxKeys, scanCount, batch          int
	maxGroups                          int
	maxDuration                        time.Duration
	keysPerSecond                      float64
}

func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.addrs, "redis.addr", "Redis `host:port` (repeat or comma-separate; Cluster seeds); default localhost:6379")
	fs.StringVar(&f.url, "redis.url", "", "Redis `URL` redis://[user@]host:port[/db] or rediss:// for TLS; no password in it")
	fs.StringVar(&f.user, "redis.user", "", "Redis ACL `user`")
	fs.StringVar(&f.passwordFile, "redis.password-file", "", "`file` holding the Redis password (else $"+PasswordEnv+")")
	fs.StringVar(&f.mode, "redis.mode", "auto", "auto (ask INFO cluster), standalone or cluster")
	fs.BoolVar(&f.tls, "redis.tls", false, "connect with TLS (implied by rediss://)")
	fs.StringVar(&f.tlsCA, "redis.tls-ca-file", "", "PEM `file` of CAs that sign the Redis server certificate")
	fs.StringVar(&f.tlsServerName, "redis.tls-server-name", "", "server `name` to verify in the Redis certificate")
	fs.BoolVar(&f.tlsSkipVerify, "redis.tls-insecure-skip-verify", false, "do not verify the Redis certificate (testing only)")
	fs.Var(&f.lockPatterns, "locks.pattern", "`glob` of lock keys (repeatable); default "+exporter.DefaultLockPattern)
	fs.Var(&f.queues, "queue", "list, stream or sorted-set `key` to report as a queue (repeatable)")
	fs.Var(&f.rules, "keygroup.rule", "`glob=group` rule for key groups (repeatable); other keys get derived groups")
	fs.IntVar(&f.maxGroups, "keygroup.max-groups", keygroup.DefaultMaxGroups, "cap on distinct key groups; the rest fold into other")
	fs.IntVar(&f.maxKeys, "sample.max-keys", exporter.DefaultMaxKeys, "keys read per node per sample; SCAN resumes next sample")
	fs.DurationVar(&f.maxDuration, "sample.max-duration", exporter.DefaultMaxDuration, "time spent scanning per node per sample")
	fs.IntVar(&f.scanCount, "sample.scan-count", exporter.DefaultScanCount, "SCAN COUNT hint")
	fs.IntVar(&f.batch, "sample.batch", exporter.DefaultBatch, "keys read per pipeline")
	fs.Float64Var(&f.keysPerSecond, "sample.keys-per-second", exporter.DefaultKeysPerSecond, "pace key reads to at most this rate per node (0: unpaced)")
}

// options builds exporter options from the flags, reading the password from
// the file or the environment. Errors never contain the password.
func (f *redisFlags) options() (exporter.Options, error) {
	var t exporter.Target
	switch {
	case f.url != "" && len(f.addrs) > 0:
		return exporter.Options{}, errors.New("set --redis.url or --redis.addr, not both")
	case f.url != "":
		var err error
		if t, err = exporter.ParseURL(f.url); err != nil {
			return exporter.Options{}, err
		}
	case len(f.addrs) > 0:
		t.Addrs = f.addrs
	default:
		t.Addrs = []string{"localhost:6379"}
	}
	if f.user != "" {
		t.Username = f.user
	}
	switch f.mode {
	case "auto":
	case "standalone":
		t.Mode = exporter.ModeStandalone
	case "cluster":
		t.Mode = exporter.ModeCluster
	default:
		return exporter.Options{}, fmt.Errorf("--redis.mode %q: want auto, standalone or cluster", f.mode)
	}
	pw, err := f.password()
	if err != nil {
		return exporter.Options{}, err
	}
	t.Password = pw
	if err := f.tlsConfig(&t); err != nil {
		return exporter.Options{}, err
	}
	groups, err := f.classifier()
	if err != nil {
		return exporter.Options{}, err
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"sample.max-keys", f.maxKeys}, {"sample.scan-count", f.scanCount}, {"sample.batch", f.batch}} {
		if n.v <= 0 {
			return exporter.Options{}, fmt.Errorf("--%s must be positive, got %d", n.name, n.v)
		}
	}
	if f.maxDuration <= 0 || f.keysPerSecond < 0 {
		return exporter.Options{}, errors.New("--sample.max-duration must be positive and --sample.keys-per-second not negative")
	}
	kps := f.keysPerSecond
	if kps == 0 {
		kps = -1 // unpaced
	}
	return exporter.Options{
		Target: t, LockPatterns: f.lockPatterns, Queues: f.queues, KeyGroups: groups,
		MaxKeys: f.maxKeys, MaxDuration: f.maxDuration, ScanCount: f.scanCount, Batch: f.batch, KeysPerSecond: kps,
	}, nil
}

func (f *redisFlags) password() (string, error) {
	env := os.Getenv(PasswordEnv)
	if f.passwordFile == "" {
		return env, nil
	}
	if env != "" {
		return "", fmt.Errorf("set $%s or --redis.password-file, not both", PasswordEnv)
	}
	b, err := os.ReadFile(f.passwordFile)
	if err != nil {
		return "", fmt.Errorf("--redis.password-file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func (f *redisFlags) tlsConfig(t *exporter.Target) error {
	if !f.tls && f.tlsCA == "" && f.tlsServerName == "" && !f.tlsSkipVerify {
		return nil
	}
	if t.TLS == nil {
		t.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if f.tlsServerName != "" {
		t.TLS.ServerName = f.tlsServerName
	}
	t.TLS.InsecureSkipVerify = f.tlsSkipVerify
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return fmt.Errorf("--redis.tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--redis.tls-ca-file %s: no PEM certificate in it", f.tlsCA)
		}
		t.TLS.RootCAs = pool
	}
	return nil
}

func (f *redisFlags) classifier() (*keygroup.Classifier, error) {
	var rules []keygroup.Rule
	for _, r := range f.rules {
		glob, group, ok := strings.Cut(r, "=")
		if !ok || glob == "" || group == "" {
			return nil, fmt.Errorf("--keygroup.rule %q: want glob=group", r)
		}
		rules = append(rules, keygroup.Glob(glob, group))
	}
	return keygroup.New(keygroup.Options{Rules: rules, MaxGroups: f.maxGroups})
}

// newFlagSet returns a flag set that reports errors to stderr and returns
// them instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cachewatch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args; ok false means exit with code (0 for -h, 2 otherwise).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

func runExporter(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlagSet("exporter", stderr)
	var rf redisFlags
	rf.register(fs)
	var listen listFlag
	fs.Var(&listen, "web.listen-address", "`address` to serve metrics on (repeatable); default "+defaultListen)
	path := fs.String("web.telemetry-path", "/metrics", "`path` of the metrics page")
	webConfig := fs.String("web.config.file", "", "exporter-toolkit web config `file` (TLS, basic auth)")
	interval := fs.Duration("sample.interval", exporter.DefaultInterval, "time between samples")
	longHeld := fs.Duration("locks.long-held", exporter.DefaultLongHeld, "owner token unchanged this long makes a lock long-held")
	missBurst := fs.Uint64("server.miss-burst", 0, "count a miss burst when server misses grow by this much in one sample (0: off)")
	logLevel := fs.String("log.level", "info", "debug, info, warn or error")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	opts, err := rf.options()
	if err == nil && (*interval <= 0 || *longHeld <= 0) {
		err = errors.New("--sample.interval and --locks.long-held must be positive")
	}
	if err == nil && !strings.HasPrefix(*path, "/") {
		err = fmt.Errorf("--web.telemetry-path %q must start with /", *path)
	}
	var level slog.Level
	if err == nil {
		err = level.UnmarshalText([]byte(*logLevel))
	}
	if err == nil && *webConfig != "" {
		err = web.Validate(*webConfig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch exporter: %v\n", err)
		return 2
	}
	if len(listen) == 0 {
		listen = listFlag{defaultListen}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts.Interval, opts.LongHeld, opts.MissBurst, opts.Logger = *interval, *longHeld, *missBurst, logger
	return serveExporter(ctx, opts, []string(listen), *path, *webConfig, logger)
}

func serveExporter(ctx context.Context, opts exporter.Options, listen []string, path, webConfig string, logger *slog.Logger) int {
	e, err := exporter.New(opts)
	if err != nil {
		logger.Error("exporter", "err", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle(path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	if path != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "cachewatch exporter",
			Description: "Lock, keyspace expiry, script and queue state sampled from Redis",
			Version:     versionString(),
			Links:       []web.LandingLinks{{Address: path, Text: "Metrics"}},
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
	systemd := false
	served := make(chan error, 1)
	go func() {
		served <- web.ListenAndServe(srv, &web.FlagConfig{WebListenAddresses: &listen, WebSystemdSocket: &systemd, WebConfigFile: &webConfig}, logger)
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
	}
	cancel()
	<-sampled
	return code
}

// versionString is the module version for the landing page.
func versionString() string {
	var b strings.Builder
	runVersion(context.Background(), nil, &b, io.Discard)
	return strings.TrimSpace(strings.TrimPrefix(b.String(), "cachewatch "))
}
