package instrument_test

import (
	"os"
	"testing"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The examples run against the Redis at redistest.ExampleAddr.
func TestMain(m *testing.M) {
	os.Exit(redistest.RunExamples(m, "ExampleClient_Lock", "ExampleClient_SetVersioned"))
}
