package doctor

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// namedPerGroup bounds the locks whose holder doctor reads per lock group
// and node (the sampler's LockHolders): the longest-held ones, which hold
// every lock a check flags unless a group holds more locks than that.
const namedPerGroup = 10_000

// textHolders bounds the holders the text report prints per finding; the
// JSON report lists them all.
const textHolders = 10

// NamedLock is a lock a finding flags, with its holder as the lock's value
// names it.
type NamedLock struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	// Format is "cachewatch" (instrument's holder value), "redislock"
	// (bsm/redislock's metadata, as Service) or "opaque" (a bare token:
	// nobody is named).
	Format   string `json:"format"`
	Service  string `json:"service,omitempty"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Instance string `json:"instance,omitempty"`
	// HeldForSeconds is from when the holder took the lock (its value's
	// acquisition time, else when the first sample saw its token) to the
	// sample's lock figures.
	HeldForSeconds float64 `json:"held_for_seconds"`
	// Alive says whether the holder is alive: "yes" or "no" for a holder
	// that keeps a liveness key (instrument's live locks), else "unknown".
	Alive string `json:"alive"`
}

// holder names the holder for a reader: "service@host pid N", followed by
// "(process gone)" when its liveness key is, or "opaque" when the value
// names nobody.
func (l NamedLock) holder() string {
	if l.Format == snapshot.Opaque {
		return snapshot.Opaque
	}
	s := l.Service
	if l.Host != "" {
		s += "@" + l.Host
	}
	if l.PID > 0 {
		s += " pid " + strconv.Itoa(l.PID)
	}
	if l.Alive == snapshot.AliveNo {
		s += " (process gone)"
	}
	return s
}

// flagged returns the locks of held that flag selects, named.
func flagged(node string, held []snapshot.HeldLock, asOf time.Time, flag func(snapshot.HeldLock) bool) []NamedLock {
	var out []NamedLock
	for _, h := range held {
		if flag(h) {
			out = append(out, NamedLock{Node: node, Key: h.Key, Format: h.Holder.Format, Service: h.Holder.Service,
				Host: h.Holder.Host, PID: h.Holder.PID, Instance: h.Holder.Instance,
				HeldForSeconds: max(asOf.Sub(h.Since), 0).Seconds(), Alive: h.Alive})
		}
	}
	return out
}

func noTTL(h snapshot.HeldLock) bool   { return h.TTL < 0 }
func pastTTL(h snapshot.HeldLock) bool { return h.PastTTL }

// writeHolders prints the first textHolders locks of a finding and how
// many more the JSON report lists.
func writeHolders(b *strings.Builder, locks []NamedLock) {
	if len(locks) == 0 {
		return
	}
	b.WriteString("  holders:\n")
	for _, l := range locks[:min(len(locks), textHolders)] {
		held := time.Duration(l.HeldForSeconds * float64(time.Second)).Round(time.Second)
		fmt.Fprintf(b, "    %s  held by %s for %s  (%s)\n", printable(l.Key), printable(l.holder()), held, printable(l.Node))
	}
	if n := len(locks) - textHolders; n > 0 {
		fmt.Fprintf(b, "    … and %d more (--format json lists them all)\n", n)
	}
}
