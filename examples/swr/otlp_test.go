package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// otlpReceiver is an OTLP/HTTP endpoint that keeps the sums it receives.
type otlpReceiver struct {
	mu   sync.Mutex
	sums map[string]float64 // instrument name → sum of its points' values (counts for histograms)
	job  string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var msg colmetrics.ExportMetricsServiceRequest
	if req.URL.Path != "/v1/metrics" || proto.Unmarshal(body, &msg) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range msg.ResourceMetrics {
		for _, a := range rm.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				r.job = a.GetValue().GetStringValue()
			}
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				r.sums[m.Name] = sumOf(m)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

func sumOf(m *metricspb.Metric) float64 {
	var s float64
	for _, p := range m.GetSum().GetDataPoints() {
		s += p.GetAsDouble() + float64(p.GetAsInt())
	}
	for _, p := range m.GetHistogram().GetDataPoints() {
		s += float64(p.GetCount())
	}
	return s
}

// With --otlp the service pushes its metrics as OTLP: the catalog's
// instruments (under the names Prometheus translates back) and the
// semantic conventions' operation duration, with service.name set.
func TestOTLPVariant(t *testing.T) {
	recv := &otlpReceiver{sums: map[string]float64{}}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	origin := httptest.NewServer(&upstream{})
	defer origin.Close()
	srv := redistest.Start(t)

	mp, err := meterProvider(context.Background(), collector.URL)
	if err != nil || mp == nil {
		t.Fatalf("meterProvider: %v, %v", mp, err)
	}
	svc, err := New(Config{Redis: srv.Client(t), Upstream: origin.URL, FreshTTL: time.Minute, HardTTL: time.Hour,
		MeterProvider: mp, Name: "swr", RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	page := httptest.NewServer(svc)
	defer page.Close()
	for range 3 {
		resp, err := http.Get(page.URL + "/page/prices")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := mp.Shutdown(context.Background()); err != nil { // pushes what it holds
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.sums["cachewatch.cache.lookups"] != 3 {
		t.Errorf("cachewatch.cache.lookups pushed %v, want 3 (one miss, two hits); got %v", recv.sums["cachewatch.cache.lookups"], recv.sums)
	}
	if recv.sums["db.client.operation.duration"] == 0 {
		t.Error("no db.client.operation.duration pushed")
	}
	if recv.job != "swr" {
		t.Errorf("service.name = %q, want swr", recv.job)
	}
}
