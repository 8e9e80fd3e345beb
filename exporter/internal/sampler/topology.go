package sampler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// topology is what the sampler knows of a target's shape: whether it is a
// Cluster (ModeAuto until the first answer) and when its masters may be
// read again: at most once a second, and after a failure 1 s doubling up to
// the interval.
type topology struct {
	mode  Mode
	until time.Time
	wait  time.Duration
}

// refreshNodes returns the nodes to sample: the configured addresses, or
// every master of the Cluster. A Cluster whose topology cannot be read keeps
// its last known masters (they then fail their samples and report up 0).
//
// It runs under sampleM, which guards nodes, topology and closed; scrapes
// never wait for the network.
func (s *Sampler) refreshNodes(ctx context.Context) []*node {
	if s.closed {
		return nil
	}
	addrs := s.addrs(ctx)
	want := make(map[string]bool, len(addrs))
	out := make([]*node, 0, len(addrs))
	for _, a := range addrs {
		if want[a] {
			continue
		}
		want[a] = true
		n := s.nodes[a]
		if n == nil {
			n = newNode(&s.cfg, a, &s.board)
			s.nodes[a] = n
		}
		out = append(out, n)
	}
	for a, n := range s.nodes { // masters gone from the topology
		if !want[a] {
			_ = n.close()
			delete(s.nodes, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].env.addr < out[j].env.addr })
	return out
}

// addrs returns the addresses to sample, reading the Cluster's masters
// when they are due.
func (s *Sampler) addrs(ctx context.Context) []string {
	t := &s.topology
	addrs := s.cfg.Conn.Addrs
	switch {
	case t.mode == ModeStandalone:
	case s.cfg.Clock.Now().Before(t.until):
		if t.mode == ModeCluster && len(s.nodes) > 0 {
			addrs = s.knownNodes()
		}
	default:
		masters, isCluster, err := s.discover(ctx)
		t.discovered(s.cfg.Clock.Now(), s.cfg.Interval, err)
		switch {
		case err == nil && isCluster:
			t.mode, addrs = ModeCluster, masters
		case err == nil && t.mode == ModeAuto:
			t.mode = ModeStandalone
		case err != nil && t.mode == ModeCluster && len(s.nodes) > 0:
			addrs = s.knownNodes()
		}
	}
	return addrs
}

func (s *Sampler) knownNodes() []string {
	out := make([]string, 0, len(s.nodes))
	for a := range s.nodes {
		out = append(out, a)
	}
	return out
}

// discovered schedules the next topology read: after a failure 1 s
// doubling up to the interval, and for a refused INFO (ACL) the interval
// doubling up to 8 × the interval, as a refused stage.
func (t *topology) discovered(now time.Time, interval time.Duration, err error) {
	wait, ceiling := time.Second, interval
	if err != nil && classify(err) == ClassNoPerm {
		wait, ceiling = interval, 8*interval
	}
	if err != nil && t.wait > 0 {
		wait = min(max(2*t.wait, wait), ceiling)
	}
	if err == nil {
		t.wait = 0
	} else {
		t.wait = wait
	}
	t.until = now.Add(wait)
}

// errNoAddrs is the topology read's error when there is nothing to ask.
var errNoAddrs = errors.New("exporter: no Redis address")

// discover asks the known nodes, then the seeds, whether this is a Cluster
// and, if so, for its masters.
func (s *Sampler) discover(ctx context.Context) (masters []string, isCluster bool, err error) {
	candidates := make([]*redis.Client, 0, len(s.nodes)+len(s.cfg.Conn.Addrs))
	for _, n := range s.nodes {
		candidates = append(candidates, n.env.rdb)
	}
	for _, a := range s.cfg.Conn.Addrs {
		if n := s.nodes[a]; n == nil {
			c := s.cfg.client(a)
			defer c.Close()
			candidates = append(candidates, c)
		}
	}
	err = errNoAddrs
	for _, c := range candidates {
		var info string
		if info, err = c.Info(ctx, "cluster").Result(); err != nil {
			continue
		}
		if !strings.Contains(info, "cluster_enabled:1") {
			return nil, false, nil
		}
		var nodes string
		if nodes, err = c.ClusterNodes(ctx).Result(); err != nil {
			continue
		}
		if masters = parseClusterMasters(nodes); len(masters) > 0 {
			return masters, true, nil
		}
		err = fmt.Errorf("%w: CLUSTER NODES lists no master", ErrMalformed)
	}
	return nil, false, err
}

// parseClusterMasters returns the addresses of the masters in a CLUSTER
// NODES reply ("<id> <ip:port@cport[,host]> <flags> …"), failed ones
// included so that they report up 0.
func parseClusterMasters(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(","+f[2]+",", ",master,") || strings.Contains(f[2], "noaddr") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if addr == "" || strings.HasPrefix(addr, ":") {
			continue
		}
		out = append(out, addr)
	}
	sort.Strings(out)
	return out
}
