package demo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
)

// The hand-written owner-checked release of the unprotected services: the
// redis.io recipe, answering -1 when the lock was already gone. The hook is
// told its role, so that a release finding the lock gone or taken counts as
// a lost lock, and its lease end as expired (gone) or refused (taken).
const releaseScriptSrc = `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('DEL', KEYS[1]) end
if v == false then return -1 end
return 0`

var releaseScript = redis.NewScript(releaseScriptSrc)

// demoScripts names the hand-written release script for the hooks.
var demoScripts = []hooks.Script{{Name: "demo_release", Src: releaseScriptSrc, Role: hooks.RoleReleaseTellsExpiry}}

// Tuning of the unprotected services' anti-patterns.
const (
	naiveLockTTL = 250 * time.Millisecond // shorter than a slow load
	pollInterval = 10 * time.Millisecond  // waiters re-read this often…
	pollAttempts = 30                     // …and give up and load after this many tries
)

// unprotected is one service instance as teams write it before cachewatch:
// cache-aside with SETEX and no jitter, and — on odd instances — a
// hand-written SET NX lock whose waiters poll and, out of patience, load
// from the database themselves.
type unprotected struct {
	env *env
	rdb *redis.Client
	// name is the instance's: its hook's Name and its job lock's metadata.
	name     string
	withLock bool
}

func newUnprotected(e *env, i int) (service, error) {
	rdb := e.newClient()
	name := fmt.Sprintf("unprotected-%d", i)
	// The job's lock is taken once, the run skipped when busy. The hook
	// would infer that (no retry within its horizon), a second after each
	// busy attempt; told, it counts them as try-once at once, as the
	// report, read the moment the phase ends, needs.
	h, err := hooks.New(hooks.Options{Registerer: e.reg, Name: name,
		KeyGroups: e.groups, Scripts: demoScripts, Pool: rdb, TryOnce: []string{e.groups.Classify(jobLockKey)},
		RetryHorizon:    e.retryHorizon,
		MissBurstWindow: burstWindow, MissBurstThreshold: burstThreshold})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("hook: %w", err)
	}
	rdb.AddHook(h)
	return &unprotected{env: e, rdb: rdb, name: name, withLock: i%2 == 1}, nil
}

func (u *unprotected) close() { u.rdb.Close() }

// read is naive cache-aside: GET; on a miss, load and SETEX.
func (u *unprotected) read(ctx context.Context, key string) (Product, error) {
	if p, hit, err := u.get(ctx, key); err != nil || hit {
		return p, err
	}
	if !u.withLock {
		return u.loadAndStore(ctx, key)
	}
	return u.readLocked(ctx, key)
}

// readLocked is the hand-written stampede guard: SET NX on a lock key; the
// losers poll the value and retry the lock, and after pollAttempts load
// from the database anyway.
func (u *unprotected) readLocked(ctx context.Context, key string) (Product, error) {
	lock, token := lockKeyOf(key), newToken()
	seen := attempts{t: u.env.truth(), horizon: u.env.retryHorizon}
	defer seen.end()
	for range pollAttempts {
		acquired, err := u.tryLock(ctx, lock, token, naiveLockTTL)
		if err != nil {
			seen.settle() // the hook counts a failed attempt apart, not as first
			return Product{}, err
		}
		seen.answered(acquired)
		if acquired {
			p, err := u.loadAndStore(ctx, key)
			u.release(ctx, lock, token)
			return p, err
		}
		time.Sleep(pollInterval)
		if p, hit, err := u.get(ctx, key); err != nil || hit {
			return p, err
		}
	}
	return u.loadAndStore(ctx, key)
}

// attempts counts one caller's lock attempts as the hook reads them on the
// wire. The hook knows a retry by its owner token within its retry
// horizon: an attempt answered more than the horizon after the previous
// one (a caller stalled by a busy machine) begins a new acquisition, and
// the busy first attempt before it was a try-once one (skipped).
type attempts struct {
	t       *truth
	horizon time.Duration
	last    time.Time // when the previous attempt was answered; zero before the first
	// busyFirst: the current acquisition's first attempt was answered
	// busy and its fate (retried or not) is not yet known.
	busyFirst bool
}

// answered counts an attempt answered acquired or busy.
func (a *attempts) answered(acquired bool) {
	if a.settle() {
		a.t.firstAttempts.Add(1)
		a.busyFirst = !acquired
	}
}

// settle decides the fate of a busy first attempt before the one just
// answered and reports whether that one begins a new acquisition.
func (a *attempts) settle() (first bool) {
	now := time.Now()
	first = a.last.IsZero() || now.Sub(a.last) > a.horizon
	a.last = now
	if a.busyFirst {
		a.busyFirst = false
		if first {
			a.t.skippedBusy.Add(1)
		} else {
			a.t.firstBusy.Add(1) // retried: a waiting caller
		}
	}
	return first
}

// end settles a busy first attempt never retried: try-once.
func (a *attempts) end() {
	if a.busyFirst {
		a.t.skippedBusy.Add(1)
	}
}

func (u *unprotected) get(ctx context.Context, key string) (Product, bool, error) {
	b, err := u.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		u.env.truth().misses.Add(1)
		return Product{}, false, nil
	}
	if err != nil {
		return Product{}, false, err
	}
	var p Product
	return p, true, json.Unmarshal(b, &p)
}

func (u *unprotected) loadAndStore(ctx context.Context, key string) (Product, error) {
	p, err := u.env.db.Load(ctx, key)
	if err != nil {
		return p, err
	}
	b, _ := json.Marshal(p)
	return p, u.rdb.SetEx(ctx, key, b, u.env.freshTTL).Err()
}

// tryLock sends SET lock value NX PX; its caller counts the attempt once
// it knows what the hook makes of it.
func (u *unprotected) tryLock(ctx context.Context, lock, value string, ttl time.Duration) (bool, error) {
	err := u.rdb.SetArgs(ctx, lock, value, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	return err == nil, nil
}

// What an owner-checked release found.
type releaseResult int

const (
	released     releaseResult = iota
	releaseGone                // the lock had expired while held
	releaseTaken               // … and another instance had taken it
	releaseError               // the script failed: nothing is known
)

// release runs the owner-checked script with the value the lock was taken
// with; anything but 1 means the lock had expired (and maybe been taken by
// another instance) while it was held.
func (u *unprotected) release(ctx context.Context, lock, value string) releaseResult {
	n, err := releaseScript.Run(ctx, u.rdb, []string{lock}, value).Int()
	switch {
	case err != nil:
		return releaseError
	case n == 1:
		return released
	}
	u.env.truth().locksLost.Add(1)
	if n == -1 {
		return releaseGone
	}
	return releaseTaken
}

// job is a periodic task that one instance at a time should run: take the
// lock once (skip when busy), work, release. Its work often outlasts the
// lock's TTL, and nothing renews it.
//
// Its lock names its holder as teams using bsm/redislock do with
// Options.Metadata: the value is a 22-character token followed by the
// metadata, here the instance's name ("unprotected-3"). The demo writes
// that value with its own SET NX PX (it does not use the library), so that
// `cachewatch locks` and the exporter's lock holder series read it as
// redislock's and name the instance holding the lock. The release compares
// the whole value.
func (u *unprotected) job(ctx context.Context) {
	value := newToken() + u.name
	acquired, err := u.tryLock(ctx, jobLockKey, value, jobLockTTL)
	if err != nil {
		return
	}
	t := u.env.truth()
	t.firstAttempts.Add(1)
	t.jobTries.Add(1)
	if !acquired {
		t.firstBusy.Add(1)
		t.jobBusy.Add(1)
		return
	}
	time.Sleep(jobWork())
	switch u.release(ctx, jobLockKey, value) {
	case releaseGone:
		t.jobLockLost.Add(1)
	case releaseTaken:
		t.jobLockLost.Add(1)
		t.jobLockTaken.Add(1)
	}
}

// write stores a price update with a plain SET: a slow update that finishes
// after a newer one replaces it.
func (u *unprotected) write(ctx context.Context, key string, version int64) {
	older, _, err := u.env.versions.write(key, version, func() (bool, error) {
		return true, u.rdb.Set(ctx, key, strconv.FormatInt(version, 10), time.Minute).Err()
	})
	if err == nil && older {
		u.env.truth().olderWrites.Add(1)
		u.env.truth().olderLanded.Add(1)
	}
}

// newToken returns a lock token made as bsm/redislock makes its own: 16
// random bytes, base64url without padding, 22 characters. A lock holding
// the bare token names nobody (`cachewatch locks` shows it as opaque).
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
