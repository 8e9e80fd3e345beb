// Package serve holds what every example's main does the same way: connect
// to Redis from a URL flag, serve /metrics beside the example's routes, and
// report a fatal error in one line. Tests share WaitFor.
package serve

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
)

// PasswordEnv holds the Redis password, as for the cachewatch command:
// never a flag, never part of the URL.
const PasswordEnv = "CACHEWATCH_REDIS_PASSWORD"

// oldPasswordEnv is still read, with a deprecation warning.
const oldPasswordEnv = "REDIS_PASSWORD"

// URLHelp is the --redis flag's help.
const URLHelp = "Redis URL redis://[user@]host:port[/db] (password from $" + PasswordEnv + ")"

// Redis returns a client for url, checked by the same parser as the
// cachewatch command's, with its password from $CACHEWATCH_REDIS_PASSWORD.
// A bad URL ends the program with status 2.
func Redis(name, url string) *redis.Client {
	t, err := exporter.ParseURL(url)
	if err != nil {
		Exit(name, 2, fmt.Errorf("--redis: %w", err))
	}
	return redis.NewClient(&redis.Options{Addr: t.Addrs[0], Username: t.Username, Password: password(name), DB: t.DB,
		TLSConfig: t.TLS, DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout})
}

// password reads $CACHEWATCH_REDIS_PASSWORD, or the older $REDIS_PASSWORD
// with a warning to rename it.
func password(name string) string {
	if pw := os.Getenv(PasswordEnv); pw != "" {
		return pw
	}
	pw := os.Getenv(oldPasswordEnv)
	if pw != "" {
		slog.Warn(name + ": $" + oldPasswordEnv + " is deprecated: set $" + PasswordEnv + " instead")
	}
	return pw
}

// HTTP serves routes, and reg's metrics on /metrics, on addr until it fails.
// /metrics speaks OpenMetrics to a scraper that asks for it, so that latency
// histograms carry their exemplars (the trace of a sampled span).
func HTTP(name, addr string, reg *prometheus.Registry, routes http.Handler) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	if routes != nil {
		mux.Handle("/", routes)
	}
	slog.Info(name+" example listening", "addr", addr)
	Exit(name, 1, http.ListenAndServe(addr, mux))
}

// Exit prints "name: err" and ends the program with code; a nil err exits 0.
func Exit(name string, code int, err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(code)
}
