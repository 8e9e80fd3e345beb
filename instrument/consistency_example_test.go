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
// the newest result. (It needs a Redis at localhost:6379, so it is compiled
// but not run.)
func ExampleClient_SetVersioned() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	first, err := c.FirstSeen(ctx, "idem:msg:1-0", 24*time.Hour)
	if err != nil || !first {
		return // Redis failed (retry later) or the message was handled already
	}
	result, err := c.SetVersioned(ctx, "profile:{42}", []byte(`{"name":"Ana"}`), 7, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	switch result {
	case instrument.OlderVersion:
		fmt.Println("a newer profile is stored; this result is dropped")
	case instrument.DuplicateVersion:
		fmt.Println("version 7 was computed twice")
	}
}
