// Package keygroup maps Redis keys to a bounded set of key groups, the only
// form in which a key may become a metric label.
//
// A key is matched against user rules first (glob or regular expression →
// group name). Without a matching rule the group is derived from the key by
// replacing ID-like segments — integers, UUIDs, hex and base64 tokens, hash
// tags — with "*": "session:8f3a9c0e11aa" becomes "session:*" and
// "job-result:{123}" becomes "job-result:*". The number of distinct groups is
// capped; once the cap is reached, new groups fold into [Other] and the
// overflow is counted.
//
// Shared returns one default classifier per Prometheus registerer, with its
// overflow counter registered there: the default of hooks, instrument and
// instrument/redlock, so that everything on one registry shares one cap.
//
// Classify runs on every Redis command, so in the steady state (the key's
// group already known) it does not allocate.
package keygroup

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Other is the group of keys that arrive after the cap on distinct groups is
// reached, and of keys that no rule matches when derivation is disabled.
const Other = "other"

// DefaultMaxGroups is the cap on distinct groups when Options.MaxGroups is 0.
const DefaultMaxGroups = 200

// MaxGroupLen bounds the length of a derived group; longer ones are cut at
// this length and end in "*".
const MaxGroupLen = 96

// ErrBadRule is returned by New for a rule that cannot be used.
var ErrBadRule = errors.New("keygroup: bad rule")

// Rule maps keys to a fixed group name.
type Rule struct {
	// Pattern is a glob ("*" matches any run of bytes, "?" one byte) or,
	// when Regexp is true, a Go regular expression matched anywhere in the
	// key (anchor it with ^ and $ to match whole keys).
	Pattern string
	Regexp  bool
	// Group is the label value for matching keys. It must be non-empty,
	// valid UTF-8 and at most MaxGroupLen bytes.
	Group string
}

// Glob returns a rule mapping keys that match the glob pattern to group.
func Glob(pattern, group string) Rule { return Rule{Pattern: pattern, Group: group} }

// Regexp returns a rule mapping keys that match the regular expression to group.
func Regexp(expr, group string) Rule { return Rule{Pattern: expr, Regexp: true, Group: group} }

// Options configures a Classifier. The zero value is usable: default
// derivation, a cap of DefaultMaxGroups, overflow not exported.
type Options struct {
	// Rules are tried in order; the first match wins.
	Rules []Rule
	// MaxGroups caps the distinct groups Classify returns, rule groups and
	// Other included. 0 means DefaultMaxGroups.
	MaxGroups int
	// NoDerive makes keys that match no rule fall into Other instead of a
	// group derived from the key.
	NoDerive bool
	// Overflow, when set, is incremented for each key folded into Other
	// because the cap was reached (signals.KeyGroupOverflow).
	Overflow prometheus.Counter
}

// Classifier maps keys to key groups. It is safe for concurrent use.
type Classifier struct {
	rules    []rule
	noDerive bool
	// derivedCap is how many derived groups fit under the cap once the rule
	// groups and Other are accounted for.
	derivedCap int
	overflow   prometheus.Counter
	overflows  atomic.Uint64

	// derived is a copy-on-write set of derived groups: readers load it
	// without locking, writers (at most derivedCap times) copy it.
	derived atomic.Pointer[map[string]string]
	mu      sync.Mutex
}

type rule struct {
	glob  string
	re    *regexp.Regexp
	group string
}

func (r *rule) match(key string) bool {
	if r.re != nil {
		return r.re.MatchString(key)
	}
	return globMatch(r.glob, key)
}

// New returns a Classifier for the options.
func New(opts Options) (*Classifier, error) {
	maxGroups := opts.MaxGroups
	if maxGroups == 0 {
		maxGroups = DefaultMaxGroups
	}
	if maxGroups < 1 {
		return nil, fmt.Errorf("keygroup: MaxGroups must be positive, got %d", maxGroups)
	}
	c := &Classifier{noDerive: opts.NoDerive, overflow: opts.Overflow}
	fixed := map[string]bool{Other: true}
	for i, r := range opts.Rules {
		cr, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("%w %d (%q): %v", ErrBadRule, i, r.Pattern, err)
		}
		c.rules = append(c.rules, cr)
		fixed[r.Group] = true
	}
	if len(fixed) > maxGroups {
		return nil, fmt.Errorf("keygroup: %d rule groups and %q exceed MaxGroups %d", len(fixed)-1, Other, maxGroups)
	}
	c.derivedCap = maxGroups - len(fixed)
	empty := map[string]string{}
	c.derived.Store(&empty)
	return c, nil
}

func compileRule(r Rule) (rule, error) {
	if r.Group == "" || len(r.Group) > MaxGroupLen || !utf8.ValidString(r.Group) {
		return rule{}, errors.New("group must be non-empty valid UTF-8 of at most 96 bytes")
	}
	if r.Pattern == "" {
		return rule{}, errors.New("empty pattern")
	}
	if !r.Regexp {
		return rule{glob: r.Pattern, group: r.Group}, nil
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return rule{}, err
	}
	return rule{re: re, group: r.Group}, nil
}

// Classify returns the key's group. It never returns "", and never more
// distinct values than the cap.
func (c *Classifier) Classify(key string) string {
	for i := range c.rules {
		if c.rules[i].match(key) {
			return c.rules[i].group
		}
	}
	if c.noDerive {
		return Other
	}
	var buf [MaxGroupLen]byte
	n := derive(buf[:], key)
	if g, ok := (*c.derived.Load())[string(buf[:n])]; ok {
		return g
	}
	return c.add(buf[:n])
}

// add records a new derived group, or folds it into Other past the cap.
func (c *Classifier) add(group []byte) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.derived.Load()
	if g, ok := old[string(group)]; ok {
		return g
	}
	if len(old) >= c.derivedCap {
		c.overflows.Add(1)
		if c.overflow != nil {
			c.overflow.Inc()
		}
		return Other
	}
	next := make(map[string]string, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	g := string(group)
	next[g] = g
	c.derived.Store(&next)
	return g
}

// Apart returns a classifier with c's rules, derivation and cap whose
// derived groups and overflow are counted apart from c's, starting empty:
// the exporter classifies lock keys with one, so that many ordinary key
// groups never fold the lock groups into Other. It has no overflow counter.
func (c *Classifier) Apart() *Classifier {
	a := &Classifier{rules: c.rules, noDerive: c.noDerive, derivedCap: c.derivedCap}
	empty := map[string]string{}
	a.derived.Store(&empty)
	return a
}

// Groups returns the derived groups seen so far (rule groups and Other are
// not included), in no particular order.
func (c *Classifier) Groups() []string {
	m := *c.derived.Load()
	out := make([]string, 0, len(m))
	for g := range m {
		out = append(out, g)
	}
	return out
}

// Overflows returns how many classifications were folded into Other because
// the cap was reached.
func (c *Classifier) Overflows() uint64 { return c.overflows.Load() }

// globMatch reports whether key matches pattern, where "*" matches any run of
// bytes and "?" exactly one. It is iterative (no backtracking blow-up) and
// does not allocate.
func globMatch(pattern, key string) bool {
	p, k := 0, 0
	star, mark := -1, 0
	for k < len(key) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == key[k]):
			p++
			k++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, k
			p++
		case star >= 0:
			p = star + 1
			mark++
			k = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
