package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster of masters only, owned by a test.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the master addresses, for go-redis ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts masters redis-servers in cluster mode, splits the 16384
// slots evenly between them, joins them and waits until every node reports
// cluster_state:ok.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	bin := Binary(t)
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, startClusterNode(t, bin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.form(ctx); err != nil {
		t.Fatalf("redistest: form cluster: %v", err)
	}
	return c
}

func startClusterNode(t testing.TB, bin string) *Server {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort(true)
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{t: t, bin: bin, dir: dir, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			args: []string{"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
				"--cluster-node-timeout", "3000"}}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("redistest: could not start cluster node: %v", lastErr)
	return nil
}

func (c *Cluster) form(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer clients[i].Close()
	}
	per := 16384 / len(c.Nodes)
	for i, cl := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = 16383
		}
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("addslots on %s: %w", c.Nodes[i].Addr, err)
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.Port)).Err(); err != nil {
			return fmt.Errorf("meet %s: %w", n.Addr, err)
		}
	}
	for {
		if c.ready(ctx, clients) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ready reports whether every node sees the whole cluster, all slots served.
func (c *Cluster) ready(ctx context.Context, clients []*redis.Client) bool {
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	for _, cl := range clients {
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
			return false
		}
	}
	return true
}
