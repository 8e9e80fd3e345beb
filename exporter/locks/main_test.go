package locks_test

import (
	"os"
	"testing"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// redisAddr is the Redis the examples use: a throwaway server started for
// this test binary, or the one REDIS_ADDR names.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunExamples(m, &redisAddr, "ExampleReader_Read"))
}
