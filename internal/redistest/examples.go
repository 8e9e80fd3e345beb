package redistest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ExampleAddr is where runnable examples expect a Redis, as go-redis's own
// examples do. Examples cannot start a throwaway server: they are
// documentation, and read as a user's code would.
const ExampleAddr = "localhost:6379"

// RunExamples is a TestMain body for a package whose examples need a Redis
// at ExampleAddr. When none answers, the named examples are skipped with a
// message saying how to run them — or, with RequireEnv=1, the run fails.
// The package's tests are unaffected: they start their own servers.
func RunExamples(m *testing.M, examples ...string) int {
	flag.Parse()
	err := ping(ExampleAddr)
	if err == nil {
		return m.Run()
	}
	msg := fmt.Sprintf("redistest: %s need a Redis at %s (%v); start one (redis-server --port 6379) to run them",
		strings.Join(examples, ", "), ExampleAddr, err)
	if os.Getenv(RequireEnv) == "1" {
		fmt.Fprintf(os.Stderr, "FAIL: %s, and %s=1 requires Redis\n", msg, RequireEnv)
		return 1
	}
	fmt.Fprintln(os.Stderr, "SKIP:", msg)
	quoted := make([]string, len(examples))
	for i, e := range examples {
		quoted[i] = regexp.QuoteMeta(e)
	}
	skip := "^(" + strings.Join(quoted, "|") + ")$"
	if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
		skip = prev + "|" + skip
	}
	if err := flag.Set("test.skip", skip); err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 2
	}
	return m.Run()
}

func ping(addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
