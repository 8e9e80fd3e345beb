// Command hello is the smallest complete cachewatch program: a go-redis
// client measured by the hook, a stale-while-revalidate cache in front of a
// slow source, and the metrics of both on /metrics.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // host:port; empty: localhost:6379
	hook, err := hooks.New(hooks.Options{Name: "hello"})                  // measures every command of rdb
	if err != nil {
		log.Fatal(err)
	}
	rdb.AddHook(hook)
	cw, err := instrument.New(rdb, instrument.Options{Name: "hello"})
	if err != nil {
		log.Fatal(err)
	}
	greetings, err := instrument.NewCache[string](cw, instrument.CacheOptions{FreshTTL: 10 * time.Second, HardTTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		msg, err := greetings.Fetch(r.Context(), "greeting:en", func(ctx context.Context) (string, error) {
			time.Sleep(200 * time.Millisecond) // the slow source: called once per refresh, whatever the callers
			return "hello, world", nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, msg)
	})
	http.Handle("/metrics", promhttp.Handler()) // the hook's and the cache's metrics
	log.Fatal(http.ListenAndServe(cmp.Or(os.Getenv("LISTEN"), "127.0.0.1:8080"), nil))
}
