package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name StartSentinel monitors.
const SentinelMaster = "cachewatch"

// StartSentinel runs a real Redis Sentinel (redis-server --sentinel) that
// monitors master under the name SentinelMaster, and waits until it reports
// the master's address. Use it with go-redis FailoverOptions.
func StartSentinel(t testing.TB, master *Server) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
		body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n",
			SentinelMaster, master.Port, SentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{t: t, bin: bin, dir: dir, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		// The config file comes first: redis-server reads it, then the
		// command-line options.
		if lastErr = s.startWith(append([]string{conf, "--sentinel"}, s.baseArgs()...)); lastErr == nil {
			t.Cleanup(s.stop)
			if err := waitMasterKnown(s.Addr, master.Addr); err != nil {
				t.Fatalf("redistest: sentinel: %v", err)
			}
			return s
		}
	}
	t.Fatalf("redistest: could not start sentinel: %v", lastErr)
	return nil
}

func waitMasterKnown(sentinelAddr, masterAddr string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		cancel()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == masterAddr {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel on %s does not report master %s: %v %v", sentinelAddr, masterAddr, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
