package instrument

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// invalidationChannel carries what Invalidate and InvalidateMatch removed to
// every process's Caches, so that their copies of those keys (LocalCopies)
// are dropped too instead of being served while stale.
const invalidationChannel = "cachewatch:invalidate"

// A notice is "k" followed by each key as <length>:<bytes> (keys may hold
// any byte, a newline included), or "p" followed by a SCAN pattern.
const (
	noticeKeys    = 'k'
	noticePattern = 'p'
)

func keysNotice(keys []string) string {
	var b strings.Builder
	b.WriteByte(noticeKeys)
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

func patternNotice(pattern string) string { return string(noticePattern) + pattern }

var errMalformedNotice = errors.New("malformed invalidation notice")

// parseNotice returns the keys a notice names, or all=true for a pattern.
func parseNotice(msg string) (keys []string, all bool, err error) {
	if msg == "" {
		return nil, false, errMalformedNotice
	}
	switch rest := msg[1:]; msg[0] {
	case noticePattern:
		return nil, true, nil
	case noticeKeys:
		for rest != "" {
			n, tail, ok := strings.Cut(rest, ":")
			size, err := strconv.Atoi(n)
			if !ok || err != nil || size < 0 || size > len(tail) {
				return keys, false, errMalformedNotice
			}
			keys, rest = append(keys, tail[:size]), tail[size:]
		}
		return keys, false, nil
	}
	return nil, false, errMalformedNotice
}

// announce publishes an invalidation notice. Redis already removed the keys;
// a lost notice only leaves other processes' copies to be served while they
// are stale, until their next read of Redis, so it is logged, not returned.
func (c *Client) announce(ctx context.Context, notice string) {
	if err := c.rdb.Publish(c.ctx(ctx), invalidationChannel, notice).Err(); err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "cachewatch invalidate: notifying other processes' copies failed",
			slog.Any("error", err))
	}
}

// dropNoticed drops the process copies that an invalidation notice names:
// those whose stored value key it lists, or all of them for a pattern.
func (ca *Cache[T]) dropNoticed(msg string) {
	keys, all, err := parseNotice(msg)
	if all || err != nil { // a malformed notice too: when unsure, serve nothing from memory
		ca.local.dropAll()
		return
	}
	ca.local.dropStored(keys)
}

// invalidations receives the invalidation notices for the Caches of one
// Client that keep process copies: one pub/sub connection per Client (not
// per Cache: a service with many Caches must not hold as many connections
// on the Redis it shares), open while any such Cache is.
type invalidations struct {
	rdb  redis.UniversalClient
	mark func(context.Context) context.Context // origin marker for the hook

	mu     sync.Mutex
	ps     *redis.PubSub
	caches map[*int]func(notice string)
	wg     *sync.WaitGroup // the connection's goroutines, awaited by remove
}

func newInvalidations(rdb redis.UniversalClient, mark func(context.Context) context.Context) *invalidations {
	return &invalidations{rdb: rdb, mark: mark, caches: map[*int]func(string){}}
}

// add hands every notice to fn until remove is called. The subscription is
// made in the background: no Cache waits on Redis to be created.
func (v *invalidations) add(fn func(notice string)) (remove func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ps == nil {
		ctx := v.mark(context.Background())
		ps := v.rdb.Subscribe(ctx)
		v.ps = ps
		wg := new(sync.WaitGroup) // one per connection: a new one may open while the last is awaited
		v.wg = wg
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = ps.Subscribe(ctx, invalidationChannel)
		}()
		go func() {
			defer wg.Done()
			v.dispatch(ps)
		}()
	}
	id := new(int)
	v.caches[id] = fn
	return func() { v.remove(id) }
}

// remove stops handing notices to a Cache; the last one closes the
// connection and waits for its goroutines.
func (v *invalidations) remove(id *int) {
	v.mu.Lock()
	if _, ok := v.caches[id]; !ok {
		v.mu.Unlock()
		return
	}
	delete(v.caches, id)
	var closed *sync.WaitGroup
	if len(v.caches) == 0 && v.ps != nil {
		_ = v.ps.Close()
		v.ps, closed = nil, v.wg
	}
	v.mu.Unlock()
	if closed != nil {
		closed.Wait()
	}
}

// dispatch hands each notice to every Cache listening.
func (v *invalidations) dispatch(ps *redis.PubSub) {
	for m := range ps.Channel() {
		v.mu.Lock()
		fns := make([]func(string), 0, len(v.caches))
		for _, fn := range v.caches {
			fns = append(fns, fn)
		}
		v.mu.Unlock()
		for _, fn := range fns {
			fn(m.Payload)
		}
	}
}
