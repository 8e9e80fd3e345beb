package exporter_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cachewatch/cachewatch/exporter"
)

// An Exporter is a prometheus.Collector: register it, run its sampling loop
// in the background, and serve the registry. Scrapes read the last sample.
func Example() {
	e, err := exporter.New(exporter.Options{
		Target: exporter.Target{
			Addrs:    []string{"localhost:6379"}, // or Cluster seeds: masters are discovered
			Password: os.Getenv("CACHEWATCH_REDIS_PASSWORD"),
		},
		LockPatterns:  []string{"lock:*", "*:lock"},
		Queues:        []string{"orders", "jobs:delayed"},
		Interval:      15 * time.Second,
		KeysPerSecond: 10000, // pace key reads on a busy server
	})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	go e.Run(context.Background())
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe(":9643", nil))
}
