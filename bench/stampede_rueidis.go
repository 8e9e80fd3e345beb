package bench

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidisaside"
)

// rueidisaside (rueidis v1.0.71): cache-aside on rueidis's client-side
// caching (RESP3 tracking), configured as its README does — a client of its
// own per process, default options. A miss takes a lock by storing the
// process's id in the key itself (SET NX GET, the key's TTL as the lock's),
// so one caller in the whole fleet loads; the others read the id, wait for
// Redis to invalidate the key (the value written) or the id's liveness
// marker (a key every process refreshes every ClientTTL/2, default 10 s, so
// a dead holder's lapses), and read again. It keeps nothing past its TTL:
// the stale crowd is a cold one, waiting on a load. Its TTL here is the
// benchmark's freshness (stampedeFresh), which also bounds every Get (its
// context) and the lock.
func buildRueidisAside(p stampedeProc, load loader) (fetcher, func()) {
	client, err := rueidisaside.NewClient(rueidisaside.ClientOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{p.addr}},
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countedRueidis{Client: c, cmds: p.cmds}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	fn := func(ctx context.Context, _ string) (string, error) { return load(ctx) }
	return func(ctx context.Context, key string) (string, error) {
		return client.Get(ctx, stampedeFresh, key, fn)
	}, client.Close
}

// countedRueidis counts the commands a rueidis client sends Redis into the
// process's cmdCounter: one per command, a pipeline's each; a cached read
// once if it reached Redis (rueidis sends it as CLIENT CACHING YES, MULTI,
// PTTL, GET, EXEC in one round trip), not at all if the client's cache
// answered it.
type countedRueidis struct {
	rueidis.Client
	cmds *cmdCounter
}

func (c countedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.cmds.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countedRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.cmds.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func (c countedRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	r := c.Client.DoCache(ctx, cmd, ttl)
	if !r.IsCacheHit() {
		c.cmds.n.Add(1)
	}
	return r
}

func (c countedRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	rs := c.Client.DoMultiCache(ctx, multi...)
	for _, r := range rs {
		if !r.IsCacheHit() {
			c.cmds.n.Add(1)
		}
	}
	return rs
}
