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

type product struct {
	ID    int     `json:"id"`
	Price float64 `json:"price"`
}

// A stale-while-revalidate cache in front of a slow source: fresh for a
// minute, served stale (while one caller in all processes refreshes it) for
// up to an hour, and loaded once across all processes on a miss.
//
// When Redis is unreachable Fetch falls back to the loader (bounded by the
// Cache's fallback concurrency), so the caller is served the same either way.
func ExampleCache_Fetch() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	client, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	products, err := instrument.NewCache[product](client, instrument.CacheOptions{
		FreshTTL: time.Minute,
		HardTTL:  time.Hour,
		Beta:     1, // XFetch: refresh hot keys a little before they go stale
		// Serve stale values from process memory while one process
		// refreshes them (and while Redis is unreachable).
		LocalCopies: 10000,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer products.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := products.Fetch(ctx, "product:42", func(ctx context.Context) (product, error) {
		// The source: called once per refresh, whatever the concurrency.
		return product{ID: 42, Price: 9.5}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.ID, p.Price)
	// Output: 42 9.5
}
