package sampler

import (
	"io"
	"log/slog"
	"testing"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/keygroup"
)

// testConfig is the configuration of a sampler of the standalone server at
// addr, with the defaults, key groups that keep every name at once and a
// quiet logger.
func testConfig(t testing.TB, addr string) Config {
	t.Helper()
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{Conn: Conn{Addrs: []string{addr}, Mode: ModeStandalone}, KeyGroups: groups,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newTestSampler returns a Sampler of cfg, closed at the end of the test.
func newTestSampler(t testing.TB, cfg Config) *Sampler {
	t.Helper()
	s := New(cfg)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func errorKey(stage Stage, class Class) snapshot.ErrorKey {
	return snapshot.ErrorKey{Stage: stage, Class: class}
}
