package instrument_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// The hook and the client push their metrics as OTLP through one
// MeterProvider, to the endpoint of $OTEL_EXPORTER_OTLP_ENDPOINT (the tests
// set it to a receiver of their own).
func Example_openTelemetry() {
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx) // a Collector, or Prometheus 3's http://prometheus:9090/api/v1/otlp
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	defer func() {
		if err := mp.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	}()

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	h, err := hooks.New(hooks.Options{MeterProvider: mp}) // only OTLP: nothing on prometheus.DefaultRegisterer
	if err != nil {
		log.Fatal(err)
	}
	rdb.AddHook(h)
	cw, err := instrument.New(rdb, instrument.Options{MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := cw.FirstSeen(ctx, "job:42:seen", time.Minute); err != nil {
		log.Fatal(err)
	}
	if err := mp.ForceFlush(ctx); err != nil { // push now, not at the next interval
		log.Fatal(err)
	}
	fmt.Println("pushed")
	// Output: pushed
}
