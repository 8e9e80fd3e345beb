package instrument

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// upperCodec is a custom codec: JSON of the upper-cased string, so a test
// can see that it, not the default, was used both ways.
type upperCodec struct{ marshals, unmarshals atomic.Int64 }

func (c *upperCodec) Marshal(v any) ([]byte, error) {
	c.marshals.Add(1)
	return json.Marshal(strings.ToUpper(v.(string)))
}

func (c *upperCodec) Unmarshal(data []byte, v any) error {
	c.unmarshals.Add(1)
	return json.Unmarshal(data, v)
}

func TestFetchCustomCodec(t *testing.T) {
	srv := redistest.Start(t)
	codec := &upperCodec{}
	ca := newFetchCache(t, srv.Client(t), prometheus.NewRegistry(), newFetchClock(), CacheOptions{Codec: codec})
	load := func(context.Context) (string, error) { return "abc", nil }
	if _, err := ca.Fetch(context.Background(), "codec:1", load); err != nil {
		t.Fatal(err)
	}
	v, err := ca.Fetch(context.Background(), "codec:1", load)
	if err != nil || v != "ABC" || codec.marshals.Load() != 1 || codec.unmarshals.Load() != 1 {
		t.Fatalf("hit through custom codec: %q, %v (marshals %d, unmarshals %d)", v, err, codec.marshals.Load(), codec.unmarshals.Load())
	}
}

func TestFetchUndecodableValueIsAnError(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{})
	if _, err := ca.Fetch(context.Background(), "bad:1", func(context.Context) (string, error) { return "x", nil }); err != nil {
		t.Fatal(err)
	}
	written(ca, "bad:1")
	// Another writer (another version of the program, another codec) left bytes this
	// codec cannot read.
	if err := rdb.HSet(context.Background(), keysFor("bad:1").value, "v", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := ca.Fetch(context.Background(), "bad:1", func(context.Context) (string, error) { return "x", nil })
	if err == nil || !strings.Contains(err.Error(), "decode cached value") {
		t.Fatalf("undecodable value: %v, want a decode error", err)
	}
	if got := lookups(ca, ca.c.group("bad:1"), resultError); got != 1 {
		t.Fatalf("error lookups = %v, want 1", got)
	}
}
