package doctor_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Key names are data anyone with write access chooses. A lock key (its
// group appears in a finding) and a hot key (listed by name) holding
// terminal escapes, a C1 CSI, a bidi override and newlines must neither
// reach the terminal raw nor start a line of their own.
func TestDoctorEscapesKeyNames(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu", "--lfu-log-factor", "0")
	rdb := srv.Client(t)
	ctx := context.Background()
	const forged = "\x1b[2J\x1b[H\nCRITICAL  node_unreachable  forged\r\n\u009b2J\u202e"
	lock, hot := "lock:"+forged, "cfg"+forged
	must(t, rdb.Set(ctx, lock, "tok", 0).Err())
	must(t, rdb.Set(ctx, hot, "v", 0).Err())
	for i := 0; i < 50; i++ {
		must(t, rdb.Get(ctx, hot).Err())
	}
	r, err := doctor.Run(ctx, doctor.Options{Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}},
		Interval: 10 * time.Millisecond, HotKeys: 5})
	must(t, err)
	if len(r.HotKeys) == 0 || r.HotKeys[0].Key != hot {
		t.Fatalf("the hostile key is not the hottest: %+v", r.HotKeys)
	}
	var text, js bytes.Buffer
	must(t, r.WriteText(&text))
	must(t, r.WriteJSON(&js))
	for name, out := range map[string]string{"text": text.String(), "json": js.String()} {
		for _, raw := range []string{"\x1b", "\r", "\u009b", "\u202e"} {
			if strings.Contains(out, raw) {
				t.Errorf("%s output holds a raw %q:\n%s", name, raw, out)
			}
		}
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, "CRITICAL") && !strings.HasPrefix(line, "CRITICAL  locks_without_ttl") {
			t.Errorf("forged line %q in:\n%s", line, text.String())
		}
	}
	// Escaped, not dropped: the operator can still tell which key it is.
	if !strings.Contains(text.String(), `cfg\x1b[2J\x1b[H\nCRITICAL`) || !strings.Contains(js.String(), `\u009b2J\u202e`) {
		t.Errorf("escaped key name missing:\n%s\n%s", text.String(), js.String())
	}
}

// A backslash in a key name is escaped too: a name holding the two
// characters `\n` must not print like one holding a newline.
func TestDoctorEscapesBackslash(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu", "--lfu-log-factor", "0")
	rdb := srv.Client(t)
	ctx := context.Background()
	newline, backslash := "cfg\nx", `cfg\nx`
	for _, k := range []string{newline, backslash} {
		must(t, rdb.Set(ctx, k, "v", 0).Err())
		for i := 0; i < 50; i++ {
			must(t, rdb.Get(ctx, k).Err())
		}
	}
	r, err := doctor.Run(ctx, doctor.Options{Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}},
		Interval: 10 * time.Millisecond, HotKeys: 5})
	must(t, err)
	var text bytes.Buffer
	must(t, r.WriteText(&text))
	out := text.String()
	if !strings.Contains(out, `cfg\nx`) || !strings.Contains(out, `cfg\\nx`) {
		t.Fatalf("the two keys are not told apart:\n%s", out)
	}
}
