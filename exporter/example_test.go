package exporter_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cachewatch/cachewatch/exporter"
)

// An Exporter is a prometheus.Collector: register it, run its sampling loop
// in the background, and serve the registry. Scrapes read the last sample;
// until the first one succeeds every address reports up 0.
func Example() {
	e, err := exporter.New(exporter.Options{
		Target: exporter.Target{
			Addrs:    []string{"localhost:6379"}, // or Cluster seeds: masters are discovered
			Password: os.Getenv("CACHEWATCH_REDIS_PASSWORD"),
		},
		Queues: []string{"orders", "jobs:delayed"},
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
		Locks: exporter.LockOptions{
			Patterns: []string{"lock:*", "*:lock", "mutex:[a-f]*"}, // Redis globs, as SCAN … MATCH reads them
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	serve := func() {
		go e.Run(context.Background())
		http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		log.Fatal(http.ListenAndServe(":9643", nil))
	}
	_ = serve // a program calls serve(); here, the state before the first sample:
	for _, s := range e.Snapshots() {
		fmt.Println(s.Node, "up:", s.Up, "-", s.Err)
	}
	// Output: localhost:6379 up: false - exporter: not sampled yet
}
