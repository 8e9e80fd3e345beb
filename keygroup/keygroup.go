// Package keygroup maps Redis keys to a bounded set of key groups, the only
// form in which a key may become a metric label.
//
// A key is matched against user rules first (glob or regular expression →
// group name). Without a matching rule its group is derived from the key's
// structure, learnt from the keys the classifier has seen, never from one
// key:
//
//   - the key is cut into tokens at separators (":", "/", ".", "@", "|",
//     "#", ";", ",", "=", " ") and, inside a segment, at "-" and "_"; its
//     shape is the sequence of separators;
//   - a token that looks like an identifier — integers, UUIDs, hex and
//     base64 tokens, dates, hash tags, anything not printable ASCII — is
//     always "*"; a word followed by a number ("order12") is its word and
//     "*";
//   - any other token (a name: "user", "alice", "profile") is kept literal
//     only once at least Options.MinKeys distinct keys of the same shape
//     have shown it at the same position (default DefaultMinKeys). Until
//     then it is "*" if that position has shown MinKeys distinct tokens
//     (it holds names, such as user names), and undecided otherwise;
//   - the group so built is exported only once MinKeys distinct keys have
//     had it. A key with an undecided token, or whose group has not been
//     seen with enough keys yet, is classified Other meanwhile.
//
// So "user:alice:profile", "user:bob:profile", … become "user:*:profile"
// once enough users have been seen, and "alice" is never exported; a
// segment shared by fewer than MinKeys keys never reaches a label, nor
// does a group that fewer keys share. Options.MinKeys 1 keeps every token
// that is not an identifier at once (no learning): for keyspaces known to
// hold no names.
//
// Learning is per classifier, so per process: processes that have each
// seen at least MinKeys keys of a group agree on it; a name shared by a
// number of keys near MinKeys may be kept by one process and starred by
// another. Learning keeps bounded state (about a megabyte at most: 256-bit
// sketches of which keys showed each token, group and position, the least
// recently seen forgotten first), and a key that is already classified the
// same way is not learnt again: Classify does not allocate once a key's
// group is known.
//
// The number of distinct groups is capped; once the cap is reached, new
// groups fold into [Other] and the overflow is counted.
//
// Shared returns one default classifier per Prometheus registerer, with its
// overflow counter registered there: the default of hooks, instrument and
// instrument/redlock, so that everything on one registry shares one cap and
// one learnt structure.
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
// reached, of keys whose group is not learnt yet, and of keys that no rule
// matches when derivation is disabled.
const Other = "other"

// DefaultMaxGroups is the cap on distinct groups when Options.MaxGroups is 0.
const DefaultMaxGroups = 200

// DefaultMinKeys is how many distinct keys must share a name at its position,
// and share a group, before either is exported, when Options.MinKeys is 0.
const DefaultMinKeys = 20

// MaxMinKeys is the largest Options.MinKeys.
const MaxMinKeys = 128

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

// Options configures a Classifier. The zero value is usable: groups learnt
// with DefaultMinKeys, a cap of DefaultMaxGroups, overflow not exported.
type Options struct {
	// Rules are tried in order; the first match wins.
	Rules []Rule
	// MaxGroups caps the distinct groups Classify returns, rule groups and
	// Other included. 0 means DefaultMaxGroups.
	MaxGroups int
	// MinKeys is how many distinct keys must show a name at its position
	// (among keys of the same shape) before it is kept literal in a group,
	// and how many must share a group before it is returned; until then
	// their keys are classified Other. 0 means DefaultMinKeys; 1 keeps
	// every name at once (identifiers are still "*"). At most MaxMinKeys.
	// Distinct keys are counted conservatively (a few more may be needed).
	MinKeys int
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
	minKeys  int
	// derivedCap is how many derived groups fit under the cap once the rule
	// groups and Other are accounted for.
	derivedCap int
	overflow   prometheus.Counter
	overflows  atomic.Uint64

	// derived is a copy-on-write set of the groups returned: readers load
	// it without locking, writers (at most derivedCap times) copy it.
	derived atomic.Pointer[map[string]string]
	// mu serialises additions to derived and learning.
	mu sync.Mutex
	// learn is the learnt structure; nil when minKeys is 1.
	learn *learner
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
	minKeys := opts.MinKeys
	if minKeys == 0 {
		minKeys = DefaultMinKeys
	}
	if minKeys < 1 || minKeys > MaxMinKeys {
		return nil, fmt.Errorf("keygroup: MinKeys must be in 1-%d, got %d", MaxMinKeys, minKeys)
	}
	c := &Classifier{noDerive: opts.NoDerive, overflow: opts.Overflow, minKeys: minKeys}
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
	c.start()
	return c, nil
}

// start empties the derived groups and the learnt structure.
func (c *Classifier) start() {
	empty := map[string]string{}
	c.derived.Store(&empty)
	if c.minKeys > 1 && !c.noDerive {
		c.learn = newLearner()
	}
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
	var sp split
	sp.cut(key)
	var buf [MaxGroupLen]byte
	if c.learn == nil {
		n := c.write(&sp, buf[:], nil)
		if g, ok := (*c.derived.Load())[string(buf[:n])]; ok {
			return g
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.admit(buf[:n])
	}
	return c.classifyLearnt(&sp, buf[:])
}

// admit returns group as a derived group, or Other (counted as an
// overflow) past the cap. It runs under c.mu.
func (c *Classifier) admit(group []byte) string {
	old := *c.derived.Load()
	if g, ok := old[string(group)]; ok {
		return g
	}
	if len(old) >= c.derivedCap {
		c.overflowed()
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

// overflowed counts one key folded into Other by the cap.
func (c *Classifier) overflowed() {
	c.overflows.Add(1)
	if c.overflow != nil {
		c.overflow.Inc()
	}
}

// Apart returns a classifier with c's rules, learning threshold and cap
// whose groups and learnt structure are kept apart from c's, starting
// empty: the exporter classifies lock keys with one, so that many ordinary
// key groups never fold the lock groups into Other. Its overflow is counted
// apart (Overflows) and in c's overflow counter, if c has one.
func (c *Classifier) Apart() *Classifier {
	a := &Classifier{rules: c.rules, noDerive: c.noDerive, minKeys: c.minKeys, derivedCap: c.derivedCap, overflow: c.overflow}
	a.start()
	return a
}

// CountsOverflow reports whether the classifier increments an overflow
// counter of its own (Options.Overflow, or the one Shared registers): a
// collector that exported Overflows too would export the series twice.
func (c *Classifier) CountsOverflow() bool { return c.overflow != nil }

// Groups returns the derived groups returned so far (rule groups and Other
// are not included), in no particular order.
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

// Epoch changes whenever learning may change the group Classify returns for
// a key it has classified before (a name learnt, a position found to hold
// names, a group exported): a cache of Classify's results is valid while
// Epoch stays the same. It is always 0 when MinKeys is 1.
func (c *Classifier) Epoch() uint64 {
	if c.learn == nil {
		return 0
	}
	return c.learn.changes.Load()
}

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
