package lockholder

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_764_000_000_123)
	cases := []struct{ service, host string }{
		{"checkout", "web-7f9c-x2"},
		{"a|b@c%d e\x00\x7f", "hôst|name"},
		{"", ""},
		{strings.Repeat("é", 40), strings.Repeat("h", 100)},
	}
	for _, c := range cases {
		id := newIdentity(c.service, c.host, 4242, Instance())
		v := id.Value("tok-en_1", at)
		if strings.Count(v, "|") != 6 || strings.Contains(v, "@") || len(v) > MaxLen {
			t.Fatalf("value %q: want 6 separators, no '@', at most %d bytes", v, MaxLen)
		}
		h := Parse(v)
		want := Holder{Kind: Cachewatch, Token: "tok-en_1", Service: cut(c.service), Host: cut(c.host),
			PID: 4242, Instance: Instance(), Acquired: at}
		if h != want {
			t.Errorf("Parse(%q) = %+v, want %+v", v, h, want)
		}
		if !utf8.ValidString(h.Service) && utf8.ValidString(c.service) {
			t.Errorf("service cut inside a rune: %q", h.Service)
		}
		for _, lease := range []string{"!" + v + "@ns:wake:ab12", v + "@ns:wake:ab12"} {
			h := Parse(lease)
			if h.Kind != Cachewatch || h.Wake != "ns:wake:ab12" || h.HoldOff != strings.HasPrefix(lease, "!") || h.Token != "tok-en_1" || h.Live {
				t.Errorf("Parse(%q) = %+v", lease, h)
			}
		}
		live := id.LiveValue("tok-en_1", at)
		want.Live = true
		if live != v+LiveMark || Parse(live) != want {
			t.Errorf("LiveValue = %q, Parse = %+v, want %q, %+v", live, Parse(live), v+LiveMark, want)
		}
		if h := Parse("!" + live); h.Live || !h.HoldOff {
			t.Errorf("Parse(%q) = %+v: a hold-off lease is not a live lock", "!"+live, h)
		}
	}
}

func TestSize(t *testing.T) {
	id := newIdentity("checkout", "web-7f9c-x2", 123456, Instance())
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	v := id.Value(tok, time.Now())
	if len(v) != id.Size(len(tok)) || len(tok) != 22 {
		t.Errorf("value %q is %d bytes, Size says %d (token %d bytes)", v, len(v), id.Size(len(tok)), len(tok))
	}
	if n := testing.AllocsPerRun(100, func() { _ = id.Value(tok, time.Now()) }); n > 1 {
		t.Errorf("Value: %v allocations, want 1", n)
	}
}

func TestOtherValues(t *testing.T) {
	cases := map[string]Holder{
		"":                                                     {},
		"abcdefghijklmnopqrstuv":                               {}, // a bare token: anyone's
		"Zx3kq+9aP/2mN8bVcW1yTg==":                             {}, // redsync
		"abcdefghijklmnopqrstuv==":                             {}, // redsync, URL-safe characters only
		"abcdefghijklmnopqrstuvjob=nightly":                    {Kind: Redislock, Token: "abcdefghijklmnopqrstuv", Metadata: "job=nightly"},
		"abcdefghij+lmnopqrstuvjob=nightly":                    {},
		"3n5x0q2kz1m8@cachewatch:wake:ab":                      {}, // an older Cache lease token
		"!3n5x0q2kz1m8":                                        {},
		"cw1|t|s|h|1|inst|":                                    {},
		"cw1|t|s|h|1|inst|12|":                                 {},
		"cw1|t|s|h|-1|inst|12":                                 {},
		"cw1|t|s|h|+1|inst|12":                                 {},
		"cw1||s|h|1|inst|12":                                   {},
		"cw1|t|s|h|1|in st|12":                                 {},
		"cw1|t|s%4|h|1|inst|12":                                {},
		"cw1|t|s%zz|h|1|inst|12":                               {},
		"cw1|t|s h|h|1|inst|12":                                {},
		"cw1|t|s|h|99999999999|inst|12":                        {},
		"cw1|t|s|h|1|inst|" + strings.Repeat("9", 20):          {},
		"cw1|t|s|h|1|inst|12" + strings.Repeat("x", MaxLen):    {},
		"cw1|t|s%7C|h|1|inst|12":                               {Kind: Cachewatch, Token: "t", Service: "s|", Host: "h", PID: 1, Instance: "inst", Acquired: time.UnixMilli(12)},
		"abcdefghijklmnopqrstuv" + strings.Repeat("m", MaxLen): {},
	}
	for v, want := range cases {
		if got := Parse(v); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", v, got, want)
		}
	}
}

func TestAliveKey(t *testing.T) {
	if got := AliveKey("AbC-_9"); got != "cachewatch:alive:{AbC-_9}" {
		t.Errorf("AliveKey = %q", got)
	}
}

func FuzzParse(f *testing.F) {
	id := newIdentity("svc", "host", 7, "inst")
	f.Add(id.Value("tok", time.UnixMilli(1)))
	f.Add("!" + id.Value("tok", time.UnixMilli(1)) + "@ch")
	f.Add("abcdefghijklmnopqrstuvmeta")
	f.Add("cw1|%|%4|%zz||||")
	f.Fuzz(func(t *testing.T, v string) {
		h := Parse(v)
		switch h.Kind {
		case Opaque:
			if h != (Holder{}) {
				t.Fatalf("opaque Holder carries %+v", h)
			}
		case Cachewatch:
			if h.Token == "" || h.PID < 0 || len(h.Service) > maxField || len(h.Host) > maxField || len(h.Instance) > 32 {
				t.Fatalf("Parse(%q) = %+v: out of bounds", v, h)
			}
			// What Parse read, Encode writes back the same.
			back := newIdentity(h.Service, h.Host, h.PID, h.Instance).Value(h.Token, h.Acquired)
			if g := Parse(back); g.Token != h.Token || g.Service != h.Service || g.Host != h.Host || !g.Acquired.Equal(h.Acquired) {
				t.Fatalf("Parse(%q) = %+v; re-encoded %q reads %+v", v, h, back, g)
			}
		case Redislock:
			if len(h.Token) != redislockTokenLen || h.Token+h.Metadata != v {
				t.Fatalf("Parse(%q) = %+v", v, h)
			}
		}
	})
}
