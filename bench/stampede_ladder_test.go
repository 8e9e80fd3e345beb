//go:build stampedeladder

package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// The ladder: variants between pubsub-floor and cachewatch, for telling
// which part of cachewatch's path costs what on a shape (docs/benchmarks.md,
// session 12). Each keeps the floor's Go path — singleflight in the
// caller's goroutine, plain go-redis calls; no batching, breaker, flight
// goroutine, metrics or codec — and takes one more step of cachewatch's
// Redis side, with its scripts and key layout:
//
//	ladder-read   FetchRead elects (no queue); the loader PUBLISHes the
//	              value on one channel all processes subscribed to, and
//	              deletes the lease, as the floor does
//	ladder-store  and the loader stores the value with FetchWrite, sent in
//	              one pipeline with the PUBLISH (one round trip, as the
//	              floor's and cachewatch's writes)
//	ladder-queue  FetchRead queues the process's own wake channel and
//	              FetchWrite publishes to the queued channels (no shared
//	              channel): cachewatch's whole Redis side
//
// Off by default, so that a full run keeps its length:
//
//	go test -tags stampedeladder -run x -bench 'BenchmarkStampede/^p4-k100$/^(pubsub-floor|ladder-.*|cachewatch)$' ./bench/
func init() {
	for _, s := range []ladderStep{ladderRead, ladderStore, ladderQueue} {
		stampedeVariants = append(stampedeVariants, stampedeVariant{s.String(),
			func(rdb *redis.Client, load loader) (fetcher, func()) { return buildLadder(rdb, load, s) }})
	}
}

type ladderStep int

const (
	ladderRead ladderStep = iota
	ladderStore
	ladderQueue
)

func (s ladderStep) String() string {
	return [...]string{"ladder-read", "ladder-store", "ladder-queue"}[s]
}

// ladderShared is the channel every process subscribes to for the first
// two steps.
const ladderShared = "ladder:shared"

func buildLadder(rdb *redis.Client, load loader, step ladderStep) (fetcher, func()) {
	var id [8]byte
	_, _ = crand.Read(id[:])
	wake := "ladder:wake:" + hex.EncodeToString(id[:])
	f := &pubsubFloor{vals: map[string]*floorValue{}}
	ps := rdb.Subscribe(context.Background(), wake, ladderShared)
	for range 2 { // both subscriptions are confirmed
		if _, err := ps.Receive(context.Background()); err != nil {
			panic(err)
		}
	}
	// A pipelined EVALSHA is not retried as EVAL on NOSCRIPT.
	if err := luascript.FetchWrite.Load(context.Background(), rdb).Err(); err != nil {
		panic(err)
	}
	go func() {
		for m := range ps.Channel() {
			if key, val, ok := ladderMessage(m); ok {
				f.deliver(key, val)
			}
		}
	}()
	elect := func(ctx context.Context, k string) error {
		token := hex.EncodeToString(id[:]) + strconv.FormatInt(time.Now().UnixNano(), 36)
		queue := ""
		if step == ladderQueue {
			queue = wake
		}
		res, err := luascript.FetchRead.Run(ctx, rdb, ladderKeys(k), time.Now().UnixMilli(), 0, 10000, token, queue).Slice()
		if err != nil {
			return err
		}
		if state, _ := res[0].(int64); state == 1 || state == 2 { // stored already
			f.deliver(k, res[2].(string))
			return nil
		}
		if granted, _ := res[1].(int64); granted == 0 {
			return nil // another process loads it
		}
		v, err := load(ctx)
		if err != nil {
			return err
		}
		if err := ladderPublish(ctx, rdb, step, k, token, v); err != nil {
			return err
		}
		f.deliver(k, v)
		return nil
	}
	return func(ctx context.Context, key string) (string, error) {
		k := "{" + key + "}"
		fv := f.value(k)
		select {
		case <-fv.done:
			return fv.v, nil
		default:
		}
		return f.await(ctx, k, fv, func() error { return elect(ctx, k) })
	}, func() { _ = ps.Close() }
}

// ladderKeys are cachewatch's three keys of stored key k.
func ladderKeys(k string) []string { return []string{k, k + ":lease", k + ":waitq"} }

// ladderPublish ends a load at step: stores (from ladderStore on) and wakes
// the other processes, in one round trip as cachewatch's write does.
func ladderPublish(ctx context.Context, rdb *redis.Client, step ladderStep, k, token, v string) error {
	if step == ladderRead {
		if err := rdb.Publish(ctx, ladderShared, k+"\x00"+v).Err(); err != nil {
			return err
		}
		return rdb.Del(ctx, k+":lease").Err()
	}
	now := time.Now().UnixMilli()
	// Fresh for stampedeFresh, as buildCachewatch's; servable for an hour,
	// and in Redis 100 s longer.
	keep := time.Hour.Milliseconds()
	write := []any{token, v, now + stampedeFresh.Milliseconds(), now + keep, 50, 0, keep + 100_000}
	if step == ladderQueue { // FetchWrite publishes to the queued channels
		return luascript.FetchWrite.Run(ctx, rdb, ladderKeys(k), write...).Err()
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		luascript.FetchWrite.EvalSha(ctx, p, ladderKeys(k), write...) // loaded by buildLadder
		p.Publish(ctx, ladderShared, k+"\x00"+v)
		return nil
	})
	return err
}

// ladderMessage reads a wake-up: "<key>\x00<value>" on the shared channel,
// or FetchWrite's on a process's own (luascript.SplitWake, ParseCarried).
func ladderMessage(m *redis.Message) (key, val string, ok bool) {
	if m.Channel == ladderShared {
		return strings.Cut(m.Payload, "\x00")
	}
	key, payload, ok := luascript.SplitWake(m.Payload)
	c, carried := luascript.ParseCarried(payload)
	return key, c.Value, ok && carried // a refusal or an oversized value carries none
}
