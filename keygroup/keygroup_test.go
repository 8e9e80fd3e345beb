package keygroup_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

func mustNew(t testing.TB, opts keygroup.Options) *keygroup.Classifier {
	t.Helper()
	c, err := keygroup.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trusted is a classifier that keeps every name at once (MinKeys 1): the
// derivation of groups without learning.
var trusted = keygroup.Options{MinKeys: 1}

func TestDerivationWithoutLearning(t *testing.T) {
	c := mustNew(t, trusted)
	cases := map[string]string{
		"session:8f3a9c0e11aa4b2f":                        "session:*",
		"job-result:{123}":                                "job-result:*",
		"user:42:profile":                                 "user:*:profile",
		"lock:order:550e8400-e29b-41d4-a716-446655440000": "lock:order:*",
		"cache:user_123":                                  "cache:user_*",
		"token:dGhpcyBpcyBhIHRva2VuMTIz":                  "token:*",
		"feed:2024-01-01":                                 "feed:*",
		"config":                                          "config",
		"rate-limit:api:v2":                               "rate-limit:api:v2",
		"lock:order:nt9":                                  "lock:order:nt*",
		"lock:order:nt10":                                 "lock:order:nt*",
		"lock:order:nt12345":                              "lock:order:nt*",
		"user42:cart":                                     "user*:cart",
		"job_run7":                                        "job_run*",
		"{orders}:lock":                                   "*:lock",
		"user{77}:cart":                                   "user*:cart",
		"unclosed{brace":                                  "unclosed{brace",
		"":                                                "*",
		"12345":                                           "*",
		"deadbeef:cafe":                                   "deadbeef:cafe",
		"obj:deadbeef01":                                  "obj:*",
		"path/to/file.json":                               "path/to/file.json",
		"héllo:1":                                         "*:*",
		"a\x00b:x":                                        "*:x",
	}
	for key, want := range cases {
		if got := c.Classify(key); got != want {
			t.Errorf("Classify(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestRules(t *testing.T) {
	c := mustNew(t, keygroup.Options{MinKeys: 1, Rules: []keygroup.Rule{
		keygroup.Glob("sess:*", "sessions"),
		keygroup.Regexp(`^report:\d+:pdf$`, "reports"),
		keygroup.Glob("a?c", "abc"),
	}})
	cases := map[string]string{
		"sess:abc":       "sessions",
		"sess:":          "sessions",
		"report:12:pdf":  "reports",
		"report:12:html": "report:*:html",
		"axc":            "abc",
		"axxc":           "axxc",
	}
	for key, want := range cases {
		if got := c.Classify(key); got != want {
			t.Errorf("Classify(%q) = %q, want %q", key, got, want)
		}
	}
	nd := mustNew(t, keygroup.Options{NoDerive: true, Rules: []keygroup.Rule{keygroup.Glob("x*", "x")}})
	if got := nd.Classify("y:1"); got != keygroup.Other {
		t.Errorf("NoDerive: got %q, want %q", got, keygroup.Other)
	}
}

func TestBadOptions(t *testing.T) {
	bad := []keygroup.Options{
		{Rules: []keygroup.Rule{keygroup.Regexp("(", "g")}},
		{Rules: []keygroup.Rule{keygroup.Glob("x", "")}},
		{Rules: []keygroup.Rule{keygroup.Glob("", "g")}},
		{Rules: []keygroup.Rule{keygroup.Glob("x", "\xff")}},
		{MaxGroups: -1},
		{MaxGroups: 2, Rules: []keygroup.Rule{keygroup.Glob("a", "a"), keygroup.Glob("b", "b")}},
		{MinKeys: -1},
		{MinKeys: keygroup.MaxMinKeys + 1},
	}
	for i, o := range bad {
		if _, err := keygroup.New(o); err == nil {
			t.Errorf("case %d: New accepted bad options", i)
		}
	}
}

// TestCapAndOverflowMetric drives more distinct groups than the cap and reads
// the overflow counter back: it must equal the keys that were folded.
func TestCapAndOverflowMetric(t *testing.T) {
	overflow := signals.KeyGroupOverflow.NewCounterVec().WithLabelValues()
	c := mustNew(t, keygroup.Options{MinKeys: 1, MaxGroups: 10, Rules: []keygroup.Rule{keygroup.Glob("r:*", "rule")}, Overflow: overflow})
	// 10 = "rule" + Other + 8 derived groups.
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		seen[c.Classify(fmt.Sprintf("name%c:1", 'a'+i))] = true
	}
	seen[c.Classify("r:x")] = true
	if len(seen) > 10 {
		t.Fatalf("%d distinct groups returned, cap is 10: %v", len(seen), seen)
	}
	if got := len(c.Groups()); got != 8 {
		t.Fatalf("derived groups = %d, want 8", got)
	}
	if got := testutil.ToFloat64(overflow); got != 12 {
		t.Fatalf("overflow counter = %v, want 12", got)
	}
	if c.Overflows() != 12 {
		t.Fatalf("Overflows() = %d, want 12", c.Overflows())
	}
	// A group admitted before the cap keeps its own name.
	if got := c.Classify("namea:99"); got != "namea:*" {
		t.Fatalf("known group after overflow = %q", got)
	}
}

func TestLongKeyBounded(t *testing.T) {
	c := mustNew(t, trusted)
	g := c.Classify(strings.Repeat("segment:", 100))
	if len(g) != keygroup.MaxGroupLen || !strings.HasSuffix(g, "*") {
		t.Fatalf("long key group = %q (%d bytes)", g, len(g))
	}
}

func TestConcurrentClassify(t *testing.T) {
	c := mustNew(t, keygroup.Options{MinKeys: 1, MaxGroups: 50})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if g := c.Classify(fmt.Sprintf("g%c%c:%d", 'a'+w, 'a'+i%26, i)); g == "" {
					t.Error("empty group")
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if n := len(c.Groups()); n > 49 {
		t.Fatalf("%d derived groups exceed cap", n)
	}
}

func TestSteadyStateAllocs(t *testing.T) {
	c := mustNew(t, keygroup.Options{Rules: []keygroup.Rule{keygroup.Regexp(`^rx:\d+$`, "rx"), keygroup.Glob("gl:*", "gl")}})
	keys := []string{"session:8f3a9c0e11aa4b2f", "rx:12", "gl:abc", "user:42:profile"}
	for _, k := range keys {
		c.Classify(k)
	}
	for _, k := range keys {
		if n := testing.AllocsPerRun(100, func() { c.Classify(k) }); n != 0 {
			t.Errorf("Classify(%q) allocates %v per call", k, n)
		}
	}
}

var sink string

// BenchmarkClassify measures Classify of keys whose group is known: the
// steady state of a hook or a client. "default" learns the groups first
// from 200 keys of each shape; "trusted" keeps names without learning
// (MinKeys 1); "rules" matches user rules. "learning" classifies keys never
// seen before, of a shape being learnt: the cost of a new key.
func BenchmarkClassify(b *testing.B) {
	keys := []string{"session:8f3a9c0e11aa4b2f", "job-result:{123}", "user:42:profile", "lock:order:550e8400-e29b-41d4-a716-446655440000"}
	run := func(b *testing.B, c *keygroup.Classifier, keys []string) {
		for _, k := range keys {
			c.Classify(k)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink = c.Classify(keys[i%len(keys)])
		}
	}
	b.Run("default", func(b *testing.B) {
		c := mustNew(b, keygroup.Options{})
		for range 2 {
			for i := range 200 {
				for _, k := range []string{"session:%x", "job-result:{%d}", "user:%d:profile", "lock:order:%08x-e29b-41d4-a716-446655440000"} {
					c.Classify(fmt.Sprintf(k, 0x8f3a9c0e+i))
				}
			}
		}
		for _, k := range keys {
			if g := c.Classify(k); g == keygroup.Other {
				b.Fatalf("%s: group not learnt", k)
			}
		}
		run(b, c, keys)
	})
	b.Run("trusted", func(b *testing.B) { run(b, mustNew(b, trusted), keys) })
	b.Run("rules", func(b *testing.B) {
		run(b, mustNew(b, keygroup.Options{Rules: []keygroup.Rule{
			keygroup.Glob("session:*", "sessions"),
			keygroup.Regexp(`^job-result:`, "job-results"),
			keygroup.Glob("user:*:profile", "profiles"),
			keygroup.Glob("lock:*", "locks"),
		}}), keys)
	})
	b.Run("learning", func(b *testing.B) {
		fresh := make([]string, 1<<16)
		for i := range fresh {
			fresh[i] = fmt.Sprintf("user:u%c%c%c:profile:%d", 'a'+i%26, 'a'+i/26%26, 'a'+i/676%26, i)
		}
		run(b, mustNew(b, keygroup.Options{}), fresh)
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"", "session:8f3a", "job-result:{123}", "{", "}{", "a{b}c{d", "\xff\xfe", strings.Repeat("x:", 80)} {
		f.Add(s)
	}
	const limit = 16
	opts := keygroup.Options{MaxGroups: limit, Rules: []keygroup.Rule{keygroup.Glob("r*z", "rz"), keygroup.Regexp("^q[0-9]", "q")}}
	learnt := mustNew(f, opts)
	opts.MinKeys = 1
	trusting := mustNew(f, opts)
	f.Fuzz(func(t *testing.T, key string) {
		for _, c := range []*keygroup.Classifier{learnt, trusting} {
			g := c.Classify(key)
			if g == "" {
				t.Fatalf("Classify(%q) returned an empty group", key)
			}
			if !utf8.ValidString(g) || len(g) > keygroup.MaxGroupLen {
				t.Fatalf("Classify(%q) = %q is not a valid label value", key, g)
			}
			if n := len(c.Groups()) + 3; n > limit { // + "rz", "q", Other
				t.Fatalf("%d distinct groups exceed the cap %d", n, limit)
			}
		}
		// Without learning a key's group never changes.
		g := trusting.Classify(key)
		if again := trusting.Classify(key); again != g {
			t.Fatalf("Classify(%q) not stable: %q then %q", key, g, again)
		}
	})
}

func ExampleClassifier_Classify() {
	c, _ := keygroup.New(keygroup.Options{Rules: []keygroup.Rule{keygroup.Glob("sess:*", "sessions")}})
	fmt.Println(c.Classify("sess:8f3a9c0e11aa"))
	// One key shows no structure: until enough keys have, it counts as other.
	fmt.Println(c.Classify("user:alice:profile"))
	syllables := []string{"al", "be", "ca", "do", "el", "fa", "gi", "ho", "iv", "ju"}
	for _, a := range syllables {
		for _, b := range syllables {
			c.Classify("user:" + a + "x" + b + ":profile")
		}
	}
	fmt.Println(c.Classify("user:alice:profile"))
	fmt.Println(c.Classify("user:bob:profile"))
	// Output:
	// sessions
	// other
	// user:*:profile
	// user:*:profile
}

// Shared gives one classifier per registerer, whose overflow counter is
// exported on that registerer from the start.
func TestSharedOnePerRegistry(t *testing.T) {
	reg, other := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := keygroup.Shared(reg)
	if b := keygroup.Shared(reg); a != b {
		t.Fatal("two Shared classifiers for one registry")
	}
	if keygroup.Shared(other) == a {
		t.Fatal("two registries share a classifier")
	}
	if keygroup.Shared(nil) != keygroup.Shared(prometheus.DefaultRegisterer) {
		t.Fatal("Shared(nil) is not the default registerer's")
	}
	const overflow = "cachewatch_keygroup_overflow_total"
	if n, err := testutil.GatherAndCount(reg, overflow); err != nil || n != 1 {
		t.Fatalf("overflow series before any overflow = %d, %v; want 1", n, err)
	}
	// 210 groups of 25 keys each ("groupaa:0" … "groupaa:24"), learnt as
	// "groupaa:*" and so on over two rounds of traffic; the cap admits 199
	// of them (Other takes one place).
	const groups, perGroup = keygroup.DefaultMaxGroups + 10, 25
	key := func(g, i int) string { return fmt.Sprintf("group%c%c:%d", 'a'+g/26, 'a'+g%26, i) }
	for range 2 {
		for i := 0; i < perGroup; i++ {
			for g := 0; g < groups; g++ {
				keygroup.Shared(reg).Classify(key(g, i))
			}
		}
	}
	if got := len(a.Groups()); got != keygroup.DefaultMaxGroups-1 {
		t.Fatalf("derived groups = %d, want %d", got, keygroup.DefaultMaxGroups-1)
	}
	// Once learnt, the keys of the groups past the cap (at least 11 of
	// them) count as other, each an overflow.
	before, refused := metrictest.Sum(t, reg, overflow), 0
	for g := 0; g < groups; g++ {
		for i := 0; i < perGroup; i++ {
			if a.Classify(key(g, i)) == keygroup.Other {
				refused++
			}
		}
	}
	grew := metrictest.Sum(t, reg, overflow) - before
	if refused < 11*perGroup || grew < 11*perGroup || grew > float64(refused) {
		t.Fatalf("%d keys classified other once learnt and the overflow grew by %v; want at least the %d keys of 11 groups, each an overflow",
			refused, grew, 11*perGroup)
	}
}
