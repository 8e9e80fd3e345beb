package sampler

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// lookup counts one command's key lookups as the server counts them in
// keyspace_hits and keyspace_misses.
type lookup struct{ calls, hits, misses uint64 }

// lookups are the sampler's own lookups by commandstats name.
type lookups map[string]*lookup

func (l lookups) count(cmd string, hit bool) {
	c := l[cmd]
	if c == nil {
		c = &lookup{}
		l[cmd] = c
	}
	c.calls++
	if hit {
		c.hits++
	} else {
		c.misses++
	}
}

// countReply counts a key read from its reply: a value or an error such as
// WRONGTYPE found the key, nil did not, and NOPERM or a lost connection
// never looked.
func (l lookups) countReply(cmd string, err error) {
	switch {
	case err == nil:
		l.count(cmd, true)
	case errors.Is(err, redis.Nil):
		l.count(cmd, false)
	case classify(err) == ClassOther:
		l.count(cmd, true)
	}
}

func (l lookups) merge(o lookups) {
	for cmd, c := range o {
		m := l[cmd]
		if m == nil {
			m = &lookup{}
			l[cmd] = m
		}
		m.calls += c.calls
		m.hits += c.hits
		m.misses += c.misses
	}
}

func (l lookups) total() (hits, misses uint64) {
	for _, c := range l {
		hits += c.hits
		misses += c.misses
	}
	return hits, misses
}

// samplerKeyCommands are the per-key reads only samplers send (applications
// read values and TTLs with GET and PTTL, not PEXPIRETIME, GETRANGE of a
// lock, or OBJECT FREQ). Every call of them since the server started — this
// exporter's, other exporters', earlier doctor runs' — is taken out of the
// hit and miss counts: this sampler's own as counted, the others' as hits
// (a sampler reads keys SCAN just returned; a miss needs the key to vanish
// in between).
var samplerKeyCommands = []string{"pexpiretime", "getrange", "object|freq"}

// queueCommands are the reads of the configured queues. Samplers send one
// TYPE per queue and sample (applications do not send TYPE), so the other
// samplers' queue reads are estimated as this sampler's, scaled by the
// TYPE calls of the others against its own.
var queueCommands = []string{"type", "llen", "xlen", "xrange", "xinfo|groups", "xpending", "zcard", "zcount", "zrange"}

// samplerCommands are the commands whose server-wide calls correct needs.
var samplerCommands = append(append([]string{}, samplerKeyCommands...), "type")

// correct returns the server's keyspace hits and misses less the samplers'
// lookups.
func (l lookups) correct(r *reading) (hits, misses uint64) {
	st := r.stats
	var h, m float64 // samplers' hits and misses
	done := map[string]bool{}
	for _, cmd := range samplerKeyCommands {
		done[cmd] = true
		own := l.get(cmd)
		others := float64(sub(r.samplerCalls[cmd], own.calls))
		h += float64(own.hits) + others
		m += float64(own.misses)
	}
	scale := 1.0
	if own := l.get("type"); own.calls > 0 {
		scale = float64(max(r.samplerCalls["type"], own.calls)) / float64(own.calls)
	}
	for _, cmd := range queueCommands {
		done[cmd] = true
		own := l.get(cmd)
		h += float64(own.hits) * scale
		m += float64(own.misses) * scale
	}
	for cmd, c := range l {
		if !done[cmd] {
			h += float64(c.hits)
			m += float64(c.misses)
		}
	}
	return sub(st.KeyspaceHits, uint64(h+0.5)), sub(st.KeyspaceMisses, uint64(m+0.5))
}

func (l lookups) get(cmd string) lookup {
	if c := l[cmd]; c != nil {
		return *c
	}
	return lookup{}
}
