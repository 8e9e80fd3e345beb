package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
)

// The README's tour of the client: a stale-while-revalidate cache and a
// lease lock, with every error handled.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	cw, err := instrument.New(rdb, instrument.Options{Name: "orders"}) // metrics on prometheus.DefaultRegisterer
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Stale-while-revalidate: fresh for a minute, then served stale while one
	// process refreshes it, never past an hour.
	products, err := instrument.NewCache[Product](cw, instrument.CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour})
	if err != nil {
		log.Fatal(err) // e.g. ErrNameTaken: another open Cache on this registry has the same name
	}
	defer products.Close()
	p, err := products.Fetch(ctx, "product:7", loadProduct) // loadProduct(ctx) (Product, error) queries your database
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Name)

	// A lease lock: waits (full-jitter retries) while another owner holds it.
	l, err := cw.Lock(ctx, "lock:report:7", instrument.LockOptions{TTL: 30 * time.Second, Renew: true})
	switch {
	case errors.Is(err, instrument.ErrLockBusy):
		fmt.Println("another instance is building the report")
		return
	case err != nil:
		log.Fatal(err) // ErrRedis, or ctx ended while waiting
	}
	defer func() {
		if err := l.Release(ctx); err != nil {
			log.Print(err) // ErrNotOwner: the lease ended before the work did
		}
	}()
	runReport(l.Context()) // l.Context() is cancelled if the lease is lost
	fmt.Println("report built")
	// Output:
	// Gopher mug
	// report built
}

// Product is what the README's cache holds.
type Product struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// loadProduct stands for the database query the cache protects.
func loadProduct(ctx context.Context) (Product, error) {
	return Product{ID: 7, Name: "Gopher mug"}, ctx.Err()
}

// runReport stands for the work done under the lock; it stops when ctx is
// done.
func runReport(ctx context.Context) { _ = ctx }
