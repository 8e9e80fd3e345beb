package keygroup_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/keygroup"
)

// words is a deterministic vocabulary of n pronounceable words (letters
// only, 4 to 9 of them): user names, tenants, slugs, random words.
func words(r *rand.Rand, n int) []string {
	const cons, vows = "bcdfgklmnprstvz", "aeiou"
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteByte(cons[r.IntN(len(cons))])
			b.WriteByte(vows[r.IntN(len(vows))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// realisticKeyspace is the keyspace of a service holding personal names:
// profiles and carts by user name, sessions by e-mail address, prices by
// SKU, rate limits by API path, feeds and reports by date, orders of a few
// large and many small tenants, and keys made of random words.
func realisticKeyspace(r *rand.Rand) []string {
	users := words(r, 3000)
	var keys []string
	add := func(format string, args ...any) { keys = append(keys, fmt.Sprintf(format, args...)) }
	domains := []string{"example.com", "gmail.com", "corp.example.org"}
	for i, u := range users[:1200] {
		add("user:%s:profile", u)
		if i%3 == 0 {
			add("cart:%s", u)
		}
		domain := domains[i%len(domains)]
		if i%50 == 0 {
			domain = users[2000+i/50] + ".net" // a rare domain: one key
		}
		add("session:%s.%s@%s", u, users[1200+i], domain)
	}
	for i := range 600 {
		add("price:sku-%c%c%d", 'A'+r.IntN(26), 'A'+r.IntN(26), 10+r.IntN(90))
		add("rate:/api/v1/%s/%d", []string{"users", "orders", "items"}[i%3], r.IntN(1_000_000))
		add("feed:%s:2024-%02d-%02d", users[i%40], 1+i%12, 1+i%28)
		add("report:daily:2025-%02d-%02d", 1+i%12, 1+i%28)
	}
	tenants := users[2500:2700]
	for i, t := range tenants {
		n := 2
		if i < 3 {
			n = 150 // large tenants: their names are shared by many keys
		}
		for j := range n {
			add("tenant:%s:orders:%d", t, 1000+j)
		}
	}
	dict := words(r, 3000)
	for range 3000 {
		add("%s-%s:%s", dict[r.IntN(len(dict))], dict[r.IntN(len(dict))], dict[r.IntN(len(dict))])
	}
	return dedupe(keys)
}

func dedupe(keys []string) []string {
	sort.Strings(keys)
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, k)
		}
	}
	return out
}

// segments cuts a key or a label at every separator the classifier knows.
func segments(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(":/|#;,=@. -_", r) })
}

// traffic classifies every key rounds times, in a new random order each
// round, and returns the groups of the last round by key.
func traffic(c *keygroup.Classifier, r *rand.Rand, keys []string, rounds int) map[string]string {
	order := append([]string(nil), keys...)
	groups := make(map[string]string, len(keys))
	for range rounds {
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			groups[k] = c.Classify(k)
		}
	}
	return groups
}

// checkNoRareSegment fails for a group that holds a segment fewer than
// minKeys of keys hold (a word followed by "*" stands for its word as a
// prefix), or that fewer than minKeys keys share.
func checkNoRareSegment(t *testing.T, keys []string, groups map[string]string, minKeys int) {
	t.Helper()
	sharing := map[string]int{}
	holders := map[string]int{} // segment of a group → keys holding it
	for _, g := range groups {
		sharing[g]++
	}
	for g := range sharing {
		for _, s := range segments(g) {
			if s != "*" && g != keygroup.Other {
				holders[s] = 0
			}
		}
	}
	for _, k := range keys {
		held := map[string]bool{}
		for _, ks := range segments(k) {
			for s := range holders {
				if holds(ks, s) {
					held[s] = true
				}
			}
		}
		for s := range held {
			holders[s]++
		}
	}
	for g, n := range sharing {
		if g == keygroup.Other {
			continue
		}
		if n < minKeys {
			t.Errorf("group %q is shared by %d keys, fewer than %d", g, n, minKeys)
		}
		for _, s := range segments(g) {
			if s != "*" && holders[s] < minKeys {
				t.Errorf("group %q holds %q, a segment of %d keys (fewer than %d)", g, s, holders[s], minKeys)
			}
		}
	}
}

// No group holds a segment that fewer than MinKeys keys hold — not a user
// name, an e-mail address, a rare domain, a SKU code, a small tenant or a
// random word — while the structure shared by many keys is learnt.
func TestRealisticKeyspaceExportsNoRareSegment(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := realisticKeyspace(r)
	c := mustNew(t, keygroup.Options{MaxGroups: 1000})
	groups := traffic(c, r, keys, 3)
	checkNoRareSegment(t, keys, groups, keygroup.DefaultMinKeys)
	first := "user:" + words(rand.New(rand.NewPCG(1, 2)), 1)[0] + ":profile"
	if got := groups[first]; got != "user:*:profile" {
		t.Errorf("%s: group %q, want user:*:profile", first, got)
	}
	learnt := map[string]bool{}
	for _, g := range groups {
		learnt[g] = true
	}
	for _, want := range []string{"user:*:profile", "cart:*", "session:*.*@example.com", "session:*.*@corp.example.org",
		"price:sku-*", "rate:/api/v1/users/*", "feed:*:*", "report:daily:*", "tenant:*:orders:*"} {
		if !learnt[want] {
			t.Errorf("group %q not learnt; groups: %v", want, sorted(learnt))
		}
	}
	t.Logf("%d groups: %v", len(learnt), sorted(learnt))
	if n := len(learnt); n > 60 {
		t.Errorf("%d groups, want a few dozen: %v", n, sorted(learnt))
	}
}

// holds reports whether a key's segment is the group's segment s or, for
// s a word followed by "*", that word followed by digits.
func holds(keySegment, s string) bool {
	word, number := strings.CutSuffix(s, "*")
	if !number {
		return keySegment == s
	}
	digits, ok := strings.CutPrefix(keySegment, word)
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A keyspace of random words (40,000 keys from an 8,000-word vocabulary,
// one to three words each) exports no word that fewer than MinKeys keys
// hold, and only a handful of groups: no key name fills the cap.
func TestRandomWordKeyspace(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	dict := words(r, 8_000)
	seps := []string{":", "-", "/", "."}
	keys := make([]string, 0, 40_000)
	for range cap(keys) {
		parts := make([]string, 1+r.IntN(3))
		for i := range parts {
			parts[i] = dict[r.IntN(len(dict))]
		}
		keys = append(keys, strings.Join(parts, seps[r.IntN(len(seps))]))
	}
	keys = dedupe(keys)
	c := mustNew(t, keygroup.Options{})
	groups := traffic(c, r, keys, 2)
	checkNoRareSegment(t, keys, groups, keygroup.DefaultMinKeys)
	if n := len(c.Groups()); n > 20 {
		t.Errorf("%d groups from random words: %v", n, c.Groups())
	}
	if c.Overflows() != 0 {
		t.Errorf("random words overflowed the cap %d times", c.Overflows())
	}
}

// Two processes that see the same keyspace in different orders, each a
// different two thirds of it, give every key the same group once learnt.
func TestProcessesAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	users := words(r, 600)
	var keys []string
	for i, u := range users {
		keys = append(keys, "user:"+u+":profile", "user:"+u+":cart", fmt.Sprintf("order:%d:lines", 1000+i), "lock:job:"+u)
	}
	a, b := mustNew(t, keygroup.Options{}), mustNew(t, keygroup.Options{})
	ga := traffic(a, r, keys[:len(keys)*2/3], 3)
	gb := traffic(b, r, keys[len(keys)/3:], 3)
	agreed := 0
	for k, g := range ga {
		if h, ok := gb[k]; ok {
			if g != h {
				t.Errorf("%s: %q in one process, %q in the other", k, g, h)
			}
			agreed++
		}
	}
	if agreed == 0 || ga[keys[0]] != "user:*:profile" {
		t.Fatalf("nothing learnt: %d keys compared, %q", agreed, ga[keys[0]])
	}
}

// A name becomes literal only once MinKeys distinct keys have shown it: a
// single key read again and again teaches nothing, and keys that fewer
// than MinKeys keys share count as other.
func TestRepetitionTeachesNothing(t *testing.T) {
	c := mustNew(t, keygroup.Options{MinKeys: 5})
	for range 1000 {
		if g := c.Classify("user:alice:profile"); g != keygroup.Other {
			t.Fatalf("one key read 1000 times: group %q", g)
		}
	}
	for _, u := range []string{"bob", "carol", "dave"} {
		c.Classify("user:" + u + ":profile")
	}
	if g := c.Classify("user:alice:profile"); g != keygroup.Other {
		t.Fatalf("four keys: group %q, want other", g)
	}
	if len(c.Groups()) != 0 || c.Epoch() != 0 {
		t.Fatalf("four keys: groups %v, epoch %d", c.Groups(), c.Epoch())
	}
}

// What changes the groups of keys already classified moves Epoch, so that
// a cache of results (the hook's) knows to drop them.
func TestEpochMovesWithLearning(t *testing.T) {
	c := mustNew(t, keygroup.Options{})
	r := rand.New(rand.NewPCG(7, 8))
	before := c.Epoch()
	groups := traffic(c, r, func() []string {
		var keys []string
		for _, u := range words(r, 100) {
			keys = append(keys, "user:"+u+":profile")
		}
		return keys
	}(), 2)
	for k, g := range groups {
		if g != "user:*:profile" {
			t.Fatalf("%s: %q", k, g)
		}
	}
	after := c.Epoch()
	if after <= before {
		t.Fatalf("Epoch %d → %d across learning", before, after)
	}
	c.Classify("user:zed:profile")
	if c.Epoch() != after {
		t.Fatalf("Epoch moved for a key of a learnt group: %d → %d", after, c.Epoch())
	}
}

// Once a key's group is learnt, classifying it does not allocate.
func TestLearntSteadyStateAllocs(t *testing.T) {
	c := mustNew(t, keygroup.Options{})
	r := rand.New(rand.NewPCG(9, 10))
	var keys []string
	for _, u := range words(r, 200) {
		keys = append(keys, "user:"+u+":profile", "session:"+u)
	}
	traffic(c, r, keys, 3)
	for _, k := range []string{keys[0], keys[1], "user:newcomer:profile", "unknown:shape:of:key"} {
		c.Classify(k)
		if n := testing.AllocsPerRun(100, func() { c.Classify(k) }); n != 0 {
			t.Errorf("Classify(%q) allocates %v per call", k, n)
		}
	}
}
