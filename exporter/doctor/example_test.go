package doctor_test

import (
	"context"
	"log"
	"os"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
)

// Run samples the keyspace twice and reports findings; a critical one
// (a lock without TTL, an unreachable node) should fail a deploy gate.
func ExampleRun() {
	report, err := doctor.Run(context.Background(), doctor.Options{
		Exporter: exporter.Options{
			Target: exporter.Target{Addrs: []string{"localhost:6379"}},
			Queues: []string{"orders"},
		},
	})
	if err != nil {
		log.Fatal(err) // no node could be sampled
	}
	_ = report.WriteText(os.Stdout)
	if report.Critical() {
		os.Exit(1)
	}
}
