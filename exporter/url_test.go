package exporter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
)

// ParseURL is the one parser of Redis URLs, for the command and for
// programs embedding the exporter: each refusal says what to write
// instead, and none repeats a secret.
func TestParseURLSaysWhatToType(t *testing.T) {
	for raw, want := range map[string]string{
		"127.0.0.1:6390":             `"127.0.0.1:6390" has no scheme: did you mean redis://127.0.0.1:6390?`,
		"localhost:6390":             "did you mean redis://localhost:6390?",
		"[::1]:6390/2":               "did you mean redis://[::1]:6390/2?",
		"u:hunter2@h:1":              "has no scheme: want redis://[user@]host:port[/db]",
		"h:1?password=hunter2":       "has no scheme: want redis://",
		"redis://h:1/0#hunter2":      `"redis://h:1/0": a #fragment is not allowed`,
		"redis://h:1/?proto=hunter2": `unknown Redis URL parameter "proto"`,
		"redis://h:0":                `port "0" is outside 1-65535`,
		"redis://h:1?read_timeout=x": "parameter read_timeout: want a positive duration",
		"http://h:1":                 "scheme must be redis or rediss",
	} {
		_, err := exporter.ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) = %v, want an error with %q", raw, err, want)
		}
	}
	tg, err := exporter.ParseURL("redis://h:1/3?dial_timeout=2s&read_timeout=500ms")
	if err != nil || tg.DialTimeout != 2*time.Second || tg.ReadTimeout != 500*time.Millisecond || tg.DB != 3 {
		t.Errorf("timeouts: %+v %v", tg, err)
	}
}

// FuzzParseURLRedacts checks that no error of ParseURL repeats a password
// given in the URL, however the URL is mangled.
func FuzzParseURLRedacts(f *testing.F) {
	f.Add("redis", "user", "hunter22", "host:6379/0")
	f.Add("rediss", "u", "pa#ss@x", "h:1")
	f.Add("redis", "u", "pa/ss", "h:%zz")
	f.Add("0#", "0", "0000", "0") // no parseable user info: the raw URL is redacted
	f.Fuzz(func(t *testing.T, scheme, user, pw, rest string) {
		if len(pw) < 4 {
			return
		}
		_, err := exporter.ParseURL(scheme + "://" + user + ":" + pw + "@" + rest)
		if err == nil || !strings.Contains(err.Error(), pw) {
			return
		}
		// The same URL with another password: if pw still shows, it comes
		// from the rest of the URL or the message, not from the password.
		_, other := exporter.ParseURL(scheme + "://" + user + ":Z@" + rest)
		if other == nil || !strings.Contains(other.Error(), pw) {
			t.Fatalf("error repeats the password: %v", err)
		}
	})
}
