package doctor_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
)

// Run samples the keyspace twice and reports findings. A deploy gate prints
// the report (report.WriteText) and fails on report.Critical() — a lock
// without TTL, an unreachable node; a program can also branch on a
// finding's Check.
func ExampleRun() {
	report, err := doctor.Run(context.Background(), doctor.Options{
		Exporter: exporter.Options{
			Target: exporter.Target{Addrs: []string{redisAddr}},
			Queues: []string{"example:no-such-queue"},
		},
		Interval: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err) // no node could be sampled
	}
	for _, f := range report.Findings {
		if f.Check == doctor.CheckQueueNotFound {
			fmt.Printf("%s: %s\n", f.Check, f.Queue)
		}
	}
	// Output: queue_not_found: example:no-such-queue
}
