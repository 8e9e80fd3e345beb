package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// protected is the same service instance on cachewatch: a lease +
// stale-while-revalidate Cache, lease locks with renewal, versioned writes.
type protected struct {
	env      *env
	rdb      *redis.Client
	products *instrument.Cache[Product]
	cw       *instrument.Client
}

func newProtected(e *env, i int) (service, error) {
	rdb := e.newClient()
	name := fmt.Sprintf("cachewatch-%d", i)
	h, err := hooks.New(hooks.Options{Registerer: e.reg, Name: name, KeyGroups: e.groups, Pool: rdb,
		RetryHorizon: e.retryHorizon, MissBurstWindow: burstWindow, MissBurstThreshold: burstThreshold})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("hook: %w", err)
	}
	rdb.AddHook(h)
	cw, err := instrument.New(rdb, instrument.Options{Registerer: e.reg, KeyGroups: e.groups, Name: name, Logger: e.quiet})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("instrumented client: %w", err)
	}
	products, err := instrument.NewCache[Product](cw, instrument.CacheOptions{
		FreshTTL: e.freshTTL,
		HardTTL:  10 * e.freshTTL,
		// No jitter: the demo judges staleness by a value's age against the
		// one fresh TTL. Services should keep the default jitter.
		Jitter:             -1,
		RefreshClaimTTL:    2 * time.Second,
		RedisTimeout:       e.redisTimeout,
		MissBurstWindow:    burstWindow,
		MissBurstThreshold: burstThreshold,
	})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &protected{env: e, rdb: rdb, products: products, cw: cw}, nil
}

func (p *protected) close() {
	_ = p.products.Close()
	p.rdb.Close()
}

func (p *protected) read(ctx context.Context, key string) (Product, error) {
	asked := time.Now()
	v, err := p.products.Fetch(ctx, key, func(ctx context.Context) (Product, error) {
		return p.env.db.Load(ctx, key)
	})
	// Stale: loaded before this call and already past its fresh TTL when
	// the call began.
	if err == nil && v.LoadedAt < asked.UnixMilli() && asked.Sub(time.UnixMilli(v.LoadedAt)) > p.env.freshTTL {
		p.env.truth().stale.Add(1)
	}
	return v, err
}

// job takes a renewed lease lock once, skipping the run when another
// instance holds it (a try-once acquisition: its attempts are labelled
// mode="try_once", which the contention alerts leave out), and works under
// the lock's context, which would end if the lease were lost.
func (p *protected) job(ctx context.Context) {
	t := p.env.truth()
	t.firstAttempts.Add(1)
	t.jobTries.Add(1)
	l, err := p.cw.Lock(ctx, jobLockKey, instrument.LockOptions{
		TTL: jobLockTTL, Renew: true, Backoff: instrument.Backoff{Retries: -1}})
	if errors.Is(err, instrument.ErrLockBusy) {
		t.firstBusy.Add(1)
		t.jobBusy.Add(1)
		return
	}
	if err != nil {
		return
	}
	work := time.NewTimer(jobWork())
	select {
	case <-work.C:
	case <-l.Context().Done():
		work.Stop()
	}
	err = l.Release(ctx)
	// Lost before the work ended, or found gone by Release: counted once.
	if errors.Is(err, instrument.ErrNotOwner) || errors.Is(context.Cause(l.Context()), instrument.ErrLockLost) {
		t.locksLost.Add(1)
		t.jobLockLost.Add(1)
	}
}

// write stores a price update by compare-and-set: an older version is
// refused and the newer value stays.
func (p *protected) write(ctx context.Context, key string, version int64) {
	var refused bool
	older, _, err := p.env.versions.write(key, version, func() (bool, error) {
		res, err := p.cw.SetVersioned(ctx, key, []byte(strconv.FormatInt(version, 10)), version, time.Minute)
		refused = res == instrument.OlderVersion
		return err == nil && !refused, err
	})
	if err != nil || !older && !refused {
		return
	}
	if older {
		p.env.truth().olderWrites.Add(1)
	}
	if refused {
		p.env.truth().olderRefused.Add(1)
	}
	if older && !refused {
		p.env.truth().olderLanded.Add(1)
	}
}
