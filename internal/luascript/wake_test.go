package luascript

import "testing"

// The parsers read what wakeWaiters and FetchWrite publish; the round trip
// through a real Redis is tested in instrument (fetch_wake_test.go).
func TestParseWakeAndParseCarried(t *testing.T) {
	for _, c := range []struct {
		name, msg, stored string
		carried           Carried
		split, ok         bool
	}{
		{"value with colons, key with colons", "9:{item:7}x=100:200:0:v:1:2", "{item:7}x",
			Carried{FreshUntil: 100, HardUntil: 200, Value: "v:1:2"}, true, true},
		{"cached not found", "3:abc=1:2:1:", "abc", Carried{FreshUntil: 1, HardUntil: 2, Negative: true}, true, true},
		{"bare wake-up", "3:abc1", "abc", Carried{}, true, false},
		{"bad deadline", "3:abc=x:2:0:v", "abc", Carried{}, true, false},
		{"too few fields", "3:abc=1:2", "abc", Carried{}, true, false},
		{"length past the end", "20:abc=1:2:0:v", "", Carried{}, false, false},
		{"no length", "abc=1:2:0:v", "", Carried{}, false, false},
		{"negative length", "-1:abc", "", Carried{}, false, false},
	} {
		w, split := ParseWake(c.msg)
		if split != c.split || w.Stored != c.stored {
			t.Errorf("%s: ParseWake(%q) = %q, %v; want %q, %v", c.name, c.msg, w.Stored, split, c.stored, c.split)
			continue
		}
		if !split {
			continue
		}
		got, ok := ParseCarried(w.Payload)
		if ok != c.ok || got != c.carried {
			t.Errorf("%s: ParseCarried(%q) = %+v, %v; want %+v, %v", c.name, w.Payload, got, ok, c.carried, c.ok)
		}
	}
}
