// Command swr serves a slow upstream through cachewatch's
// stale-while-revalidate cache: across every instance of the service one
// request per refresh reaches the upstream while the others wait for it or
// are served the stale value; an upstream error keeps the stale value served
// (until its hard TTL); with Redis down the handler degrades to calling the
// upstream directly, with bounded concurrency behind a circuit breaker,
// instead of failing.
//
//	go run ./examples/swr --redis redis://localhost:6379 --upstream https://api.example/prices
//
// Without --upstream it starts a stand-in upstream of its own, which
// answers every path slowly and logs each call.
//
// With --otlp (or OTEL_EXPORTER_OTLP_ENDPOINT set) the service also pushes
// its metrics as OTLP over HTTP, through the OpenTelemetry SDK, to that
// endpoint: a Collector, or Prometheus 3's own receiver
// (--otlp http://prometheus:9090/api/v1/otlp). Prometheus's OTLP
// translation gives back the same series names, so the dashboards and
// alerts work on either path.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/cachewatch/cachewatch/examples/internal/serve"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// Page is what the upstream answers for one path.
type Page struct {
	Body      string    `json:"body"`
	FetchedAt time.Time `json:"fetched_at"`
}

// Service is one instance of the HTTP service.
type Service struct {
	pages    *instrument.Cache[Page]
	upstream string
	http     *http.Client
}

// Config is what an instance needs.
type Config struct {
	Redis    *redis.Client
	Upstream string // base URL of the slow upstream
	// FreshTTL and HardTTL: serve as fresh, then stale while one request in
	// the fleet revalidates, never past HardTTL.
	FreshTTL, HardTTL time.Duration
	Registerer        prometheus.Registerer
	// MeterProvider, when set, receives the same metrics as OpenTelemetry
	// instruments (pushed as OTLP by its reader).
	MeterProvider metric.MeterProvider
	Name          string // the instance's client label
	// RedisTimeout bounds each Redis round trip (0: the cache's default);
	// past it the request degrades to calling the upstream directly.
	RedisTimeout time.Duration
}

// New wires the hook and the instrumented cache onto cfg.Redis.
func New(cfg Config) (*Service, error) {
	h, err := hooks.New(hooks.Options{Registerer: cfg.Registerer, MeterProvider: cfg.MeterProvider, Name: cfg.Name})
	if err != nil {
		return nil, err
	}
	cfg.Redis.AddHook(h)
	cw, err := instrument.New(cfg.Redis, instrument.Options{Registerer: cfg.Registerer, MeterProvider: cfg.MeterProvider, Name: cfg.Name})
	if err != nil {
		return nil, err
	}
	pages, err := instrument.NewCache[Page](cw, instrument.CacheOptions{
		FreshTTL: cfg.FreshTTL, HardTTL: cfg.HardTTL, RedisTimeout: cfg.RedisTimeout})
	if err != nil {
		return nil, err
	}
	return &Service{pages: pages, upstream: cfg.Upstream, http: &http.Client{Timeout: 5 * time.Second}}, nil
}

// Close stops the cache's background work.
func (s *Service) Close() error { return s.pages.Close() }

// ServeHTTP answers GET /page/{path...} from the cache.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	p, err := s.pages.Fetch(r.Context(), "page:"+path, func(ctx context.Context) (Page, error) {
		return s.fetch(ctx, path)
	})
	if err != nil {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Age", fmt.Sprint(int(time.Since(p.FetchedAt).Seconds())))
	_ = json.NewEncoder(w).Encode(p)
}

// fetch is the slow upstream call the cache protects.
func (s *Service) fetch(ctx context.Context, path string) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.upstream+path, nil)
	if err != nil {
		return Page{}, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return Page{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Page{}, fmt.Errorf("upstream %s: %s", path, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Page{Body: string(body), FetchedAt: time.Now()}, err
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "HTTP address")
	url := flag.String("redis", "redis://127.0.0.1:6379", serve.URLHelp)
	upstream := flag.String("upstream", "", "base URL of the slow upstream (default: a stand-in started in this process)")
	otlp := flag.String("otlp", "", "also push metrics as OTLP/HTTP to this base URL, e.g. http://127.0.0.1:9090/api/v1/otlp (default: $OTEL_EXPORTER_OTLP_ENDPOINT, if set)")
	flag.Parse()
	reg := prometheus.NewRegistry()
	mp, err := meterProvider(context.Background(), *otlp)
	if err != nil {
		serve.Exit("swr", 2, err)
	}
	if mp != nil {
		defer func() { _ = mp.Shutdown(context.Background()) }() // pushes what is left
	}
	if *upstream == "" {
		if *upstream, err = standIn(); err != nil {
			serve.Exit("swr", 1, err)
		}
	}
	svc, err := New(Config{Redis: serve.Redis("swr", *url), Upstream: *upstream,
		FreshTTL: 30 * time.Second, HardTTL: 10 * time.Minute, Registerer: reg, MeterProvider: nilIfNone(mp), Name: "swr"})
	if err != nil {
		serve.Exit("swr", 1, err)
	}
	defer svc.Close()
	mux := http.NewServeMux()
	mux.Handle("/page/", svc)
	serve.HTTP("swr", *listen, reg, mux)
}

// standInDelay is how long the stand-in upstream takes to answer.
const standInDelay = 300 * time.Millisecond

// standIn starts a slow upstream in this process, for a first run without
// one of your own, and returns its base URL. It answers every path after
// standInDelay and logs each call, so that the log shows one call per
// refresh however many requests the service gets.
func standIn() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("stand-in upstream: %w", err)
	}
	var calls atomic.Int64
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := calls.Add(1)
			slog.Info("stand-in upstream called", "path", r.URL.Path, "calls", n)
			time.Sleep(standInDelay)
			fmt.Fprintf(w, "%s as of %s", strings.TrimPrefix(r.URL.Path, "/"), time.Now().UTC().Format(time.RFC3339))
		}))
	}()
	url := "http://" + ln.Addr().String()
	slog.Info("no --upstream: serving a stand-in", "upstream", url, "delay", standInDelay)
	return url, nil
}

// meterProvider returns an OpenTelemetry SDK MeterProvider that pushes OTLP
// over HTTP every 15s to endpoint (a base URL, /v1/metrics is appended), or
// to the OTEL_EXPORTER_OTLP_* environment's endpoint when endpoint is "";
// nil when neither is set. The resource comes from the environment too
// (OTEL_SERVICE_NAME, default "swr"; OTEL_RESOURCE_ATTRIBUTES): service.name
// and service.instance.id become the job and instance labels in Prometheus.
func meterProvider(ctx context.Context, endpoint string) (*sdkmetric.MeterProvider, error) {
	var opts []otlpmetrichttp.Option
	switch {
	case endpoint != "":
		opts = append(opts, otlpmetrichttp.WithEndpointURL(strings.TrimSuffix(endpoint, "/")+"/v1/metrics"))
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") == "":
		return nil, nil
	}
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp: %w", err)
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "swr"
	}
	host, _ := os.Hostname()
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(name), semconv.ServiceInstanceID(host)),
		resource.Environment())
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(15*time.Second)))), nil
}

// nilIfNone keeps a nil *MeterProvider from becoming a non-nil interface.
func nilIfNone(mp *sdkmetric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		return nil
	}
	return mp
}
