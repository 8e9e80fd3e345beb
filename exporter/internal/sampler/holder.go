package sampler

import (
	"slices"
	"strings"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/lockholder"
)

// holders interns the holders lock values name: the locks of one process
// share one Holder, so the index grows by a pointer per lock, not by the
// strings of its value. Interned strings are copies, never slices of the
// value read (which would keep up to MaxTokenBytes alive per lock).
type holders struct {
	known map[snapshot.Holder]*snapshot.Holder
}

// of parses a lock value (at most MaxTokenBytes of it) and returns its
// interned holder and the acquisition time it tells (Unix ms; 0 none).
func (h *holders) of(value string) (*snapshot.Holder, int64) {
	id, acquired := ParseHolder(value)
	if h.known == nil {
		h.known = map[snapshot.Holder]*snapshot.Holder{}
	}
	if p, ok := h.known[id]; ok {
		return p, acquired
	}
	id.Service, id.Host, id.Instance = strings.Clone(id.Service), strings.Clone(id.Host), strings.Clone(id.Instance)
	p := &id
	h.known[id] = p
	return p, acquired
}

// prune forgets the holders no indexed lock names any more: it runs when a
// pass completes, so a holder outlives its last lock by at most a pass.
func (h *holders) prune(entries map[string]lockEntry) {
	if len(h.known) == 0 {
		return
	}
	used := make(map[*snapshot.Holder]bool, len(h.known))
	for _, en := range entries {
		if en.holder != nil {
			used[en.holder] = true
		}
	}
	for id, p := range h.known {
		if !used[p] {
			delete(h.known, id)
		}
	}
}

// ParseHolder reads who a lock value names (lockholder's format, or
// bsm/redislock's metadata, named as the service) and when it was acquired
// (Unix ms; 0 when it does not tell). A value read to MaxTokenBytes may
// have been cut, its acquisition time with it: it names nobody.
func ParseHolder(value string) (snapshot.Holder, int64) {
	if len(value) >= MaxTokenBytes {
		return snapshot.Holder{Format: snapshot.Opaque}, 0
	}
	h := lockholder.Parse(value)
	out := snapshot.Holder{Format: h.Kind.String(), Service: h.Service, Host: h.Host, PID: h.PID, Instance: h.Instance, Live: h.Live}
	switch h.Kind {
	case lockholder.Cachewatch:
		return out, h.Acquired.UnixMilli()
	case lockholder.Redislock:
		out.Service = h.Metadata[:min(len(h.Metadata), maxMetadata)]
	}
	return out, 0
}

// maxMetadata bounds the redislock metadata kept as a holder's service.
const maxMetadata = 64

// heldSince is when the holder of en took its lock: the acquisition time
// its value tells, unless missing or after the sampler first saw its
// token (the holder's clock is ahead of ours), else that first sight.
func heldSince(en *lockEntry) time.Time {
	if en.acquired > 0 && en.acquired <= en.since.UnixMilli() {
		return time.UnixMilli(en.acquired)
	}
	return en.since
}

// offer keeps the lock among the group's n longest-held (by heldSince,
// then key), if it is one of them. Locks whose value was not read name no
// holder and are left out.
func (g *lockGroup) offer(n int, key string, en *lockEntry, ttl time.Duration, longHeld, pastTTL bool, alive string) {
	if n <= 0 || en.holder == nil {
		return
	}
	since := heldSince(en)
	at, _ := slices.BinarySearchFunc(g.holders, since, func(h snapshot.HeldLock, t time.Time) int {
		if c := h.Since.Compare(t); c != 0 {
			return c
		}
		return strings.Compare(h.Key, key)
	})
	if at >= n {
		return
	}
	h := snapshot.HeldLock{Key: key, Group: en.group, Holder: *en.holder, Since: since, TTL: ttl, LongHeld: longHeld, PastTTL: pastTTL, Alive: alive}
	g.holders = slices.Insert(g.holders, at, h)
	if len(g.holders) > n {
		g.holders = g.holders[:n]
	}
}
