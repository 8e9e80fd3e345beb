package redistest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// closedAddr is what a package's Redis address is left at when its examples
// are skipped: a loopback port nothing listens on, so that an example that
// was not named to RunExamples fails loudly instead of reaching a Redis at
// go-redis's default address.
const closedAddr = "127.0.0.1:1"

// RunExamples is a TestMain body for a package whose runnable examples need
// a Redis. It starts a throwaway redis-server for the whole test binary (or
// uses the one REDIS_ADDR names), stores its address in *addr, where the
// examples read it, runs the package's tests and examples, and stops the
// server. Without redis-server the named examples are skipped with a message
// saying how to run them — or, with CACHEWATCH_REQUIRE_REDIS=1, the run
// fails. The package's tests are unaffected: they start their own servers.
//
// Examples share the server, so each must leave it as it expects to find it
// or clear what it uses first, as the examples of a user's own Redis would.
func RunExamples(m *testing.M, addr *string, examples ...string) int {
	flag.Parse()
	a, stop, err := exampleRedis()
	if err == nil {
		defer stop()
		*addr = a
		return m.Run()
	}
	*addr = closedAddr
	why := fmt.Sprintf("redistest: %s need a Redis: %v", strings.Join(examples, ", "), err)
	if os.Getenv(RequireEnv) == "1" {
		fmt.Fprintf(os.Stderr, "FAIL: %s, and %s=1 requires Redis\n", why, RequireEnv)
		return 1
	}
	fmt.Fprintf(os.Stderr, "SKIP: %s; %s\n", why, howToRun)
	if err := skipTests(examples); err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 2
	}
	return m.Run()
}

// exampleRedis returns the address of the examples' Redis and how to stop
// it: the one REDIS_ADDR names when it answers, otherwise a new server in a
// temporary directory.
func exampleRedis() (addr string, stop func(), err error) {
	if a := os.Getenv(AddrEnv); a != "" {
		if err := answers(a); err != nil {
			return "", nil, err
		}
		return a, func() {}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not found in PATH")
	}
	dir, err := os.MkdirTemp("", "redistest-examples-")
	if err != nil {
		return "", nil, err
	}
	srv, err := startIn(bin, dir, func(*Server) {})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("could not start redis-server: %w", err)
	}
	return srv.Addr, func() { srv.stop(); _ = os.RemoveAll(dir) }, nil
}

// skipTests adds the named tests or examples to -test.skip.
func skipTests(names []string) error {
	quoted := make([]string, len(names))
	for i, e := range names {
		quoted[i] = regexp.QuoteMeta(e)
	}
	skip := "^(" + strings.Join(quoted, "|") + ")$"
	if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
		skip = prev + "|" + skip
	}
	return flag.Set("test.skip", skip)
}
