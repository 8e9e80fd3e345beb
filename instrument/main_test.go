package instrument_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// redisAddr is the Redis the examples use: a throwaway server started for
// this test binary, or the one REDIS_ADDR names.
var redisAddr string

func TestMain(m *testing.M) {
	// The OpenTelemetry example pushes OTLP where the environment says, as
	// a program would: here, to a receiver that accepts everything.
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" {
			http.NotFound(w, r)
		}
	}))
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	code := redistest.RunExamples(m, &redisAddr, "Example", "Example_openTelemetry", "ExampleClient_Lock", "ExampleClient_SetVersioned", "ExampleCache_Fetch")
	otlp.Close()
	os.Exit(code)
}
