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

func TestDefaultDerivation(t *testing.T) {
	c := mustNew(t, keygroup.Options{})
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
	c := mustNew(t, keygroup.Options{Rules: []keygroup.Rule{
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
	c := mustNew(t, keygroup.Options{MaxGroups: 10, Rules: []keygroup.Rule{keygroup.Glob("r:*", "rule")}, Overflow: overflow})
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
	c := mustNew(t, keygroup.Options{})
	g := c.Classify(strings.Repeat("segment:", 100))
	if len(g) != keygroup.MaxGroupLen || !strings.HasSuffix(g, "*") {
		t.Fatalf("long key group = %q (%d bytes)", g, len(g))
	}
}

func TestConcurrentClassify(t *testing.T) {
	c := mustNew(t, keygroup.Options{MaxGroups: 50})
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

func BenchmarkClassify(b *testing.B) {
	keys := []string{"session:8f3a9c0e11aa4b2f", "job-result:{123}", "user:42:profile", "lock:order:550e8400-e29b-41d4-a716-446655440000"}
	run := func(b *testing.B, c *keygroup.Classifier) {
		for _, k := range keys {
			c.Classify(k)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink = c.Classify(keys[i%len(keys)])
		}
	}
	b.Run("default", func(b *testing.B) { run(b, mustNew(b, keygroup.Options{})) })
	b.Run("rules", func(b *testing.B) {
		run(b, mustNew(b, keygroup.Options{Rules: []keygroup.Rule{
			keygroup.Glob("session:*", "sessions"),
			keygroup.Regexp(`^job-result:`, "job-results"),
			keygroup.Glob("user:*:profile", "profiles"),
			keygroup.Glob("lock:*", "locks"),
		}}))
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"", "session:8f3a", "job-result:{123}", "{", "}{", "a{b}c{d", "\xff\xfe", strings.Repeat("x:", 80)} {
		f.Add(s)
	}
	const limit = 16
	c := mustNew(f, keygroup.Options{MaxGroups: limit, Rules: []keygroup.Rule{keygroup.Glob("r*z", "rz"), keygroup.Regexp("^q[0-9]", "q")}})
	f.Fuzz(func(t *testing.T, key string) {
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
		if again := c.Classify(key); again != g {
			t.Fatalf("Classify(%q) not stable: %q then %q", key, g, again)
		}
	})
}

func ExampleClassifier_Classify() {
	c, _ := keygroup.New(keygroup.Options{Rules: []keygroup.Rule{keygroup.Glob("sess:*", "sessions")}})
	fmt.Println(c.Classify("sess:8f3a9c0e11aa"))
	fmt.Println(c.Classify("job-result:{123}"))
	fmt.Println(c.Classify("user:42:profile"))
	// Output:
	// sessions
	// job-result:*
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
	for i := 0; i < keygroup.DefaultMaxGroups+10; i++ {
		keygroup.Shared(reg).Classify(fmt.Sprintf("group%c%c:1", 'a'+i/26, 'a'+i%26))
	}
	if got := len(a.Groups()); got != keygroup.DefaultMaxGroups-1 { // Other takes one place
		t.Fatalf("derived groups = %d, want %d", got, keygroup.DefaultMaxGroups-1)
	}
	if got := metrictest.Sum(t, reg, overflow); got != 11 {
		t.Fatalf("overflow = %v, want 11", got)
	}
}
