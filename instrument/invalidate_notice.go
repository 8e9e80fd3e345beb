package instrument

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
)

// Invalidation notices, on the Client's <namespace>:invalidate channel,
// carry what Invalidate and InvalidateMatch removed to every process's
// Caches, so that their copies of those keys (LocalCopies) are dropped too
// instead of being served while stale.
//
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
	if err := c.rdb.Publish(c.ctx(ctx), c.hub.invalidate, notice).Err(); err != nil {
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
