package instrument_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
)

// A queue worker that may see a message twice and jobs that complete out of
// order: the idempotency key skips the duplicate, the versioned write keeps
// the newest result.
func ExampleClient_SetVersioned() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	c, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Start from a clean slate, so the example prints the same every run.
	if _, err := c.Invalidate(ctx, "idem:msg:1-0", "idem:msg:2-0", "idem:msg:3-0", "profile:{42}"); err != nil {
		log.Fatal(err)
	}

	handle := func(msgID string, version int64, profile string) {
		first, err := c.FirstSeen(ctx, "idem:"+msgID, 24*time.Hour)
		if err != nil {
			log.Fatal(err) // Redis failed: leave the message for a retry
		}
		if !first {
			fmt.Printf("%s: handled already, skipped\n", msgID)
			return
		}
		result, err := c.SetVersioned(ctx, "profile:{42}", []byte(profile), version, time.Hour)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: version %d %s\n", msgID, version, result)
	}
	handle("msg:1-0", 7, `{"name":"Ana"}`)   // the job that computed version 7
	handle("msg:1-0", 7, `{"name":"Ana"}`)   // the same message, delivered again
	handle("msg:2-0", 6, `{"name":"Anna"}`)  // a slower job, with an older result
	handle("msg:3-0", 8, `{"name":"Ana B"}`) // a newer result
	// Output:
	// msg:1-0: version 7 written
	// msg:1-0: handled already, skipped
	// msg:2-0: version 6 older
	// msg:3-0: version 8 written
}
