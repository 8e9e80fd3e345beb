// Package bench holds benchmarks and tests that compare cachewatch with peer
// libraries (go-redis/cache, sturdyc, bsm/redislock, redsync, redisotel).
// It is a module of its own so that the peers never enter cachewatch's go.mod.
package bench
