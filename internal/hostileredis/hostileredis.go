// Package hostileredis serves, on a loopback port, a Redis endpoint that
// answers one command with a hostile reply — what no Redis sends but a
// broken proxy, a compromised server or anything else on the port can: a
// length out of range, a length claimed and never sent, a huge reply,
// bytes that are not the protocol, a reply cut off, a SCAN cursor that
// loops. Every other command gets a small, valid answer. Tests only: what
// Redis decides is tested against a real redis-server.
package hostileredis

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Mode is the hostile reply.
type Mode int

// Hostile replies.
const (
	// HugeHeader answers with the length header $9223372036854775000,
	// then nothing.
	HugeHeader Mode = iota + 1
	// ClaimedAbsent claims a 4 GiB string and sends a few bytes of it.
	ClaimedAbsent
	// RealHuge sends a 100 MB string, streamed.
	RealHuge
	// Garbage answers with an HTTP response, which is not the protocol.
	Garbage
	// MidReplyClose sends a string's length and part of it, then closes
	// the connection.
	MidReplyClose
	// LoopingCursor makes SCAN answer cursor 7 and the same key, forever:
	// a pass never ends. Its command is SCAN, whatever Start is given.
	LoopingCursor
)

// Modes lists every hostile reply, with a name for subtests.
var Modes = []struct {
	Name string
	Mode Mode
}{
	{"huge header", HugeHeader}, {"claimed 4 GiB", ClaimedAbsent}, {"100 MB reply", RealHuge},
	{"not RESP", Garbage}, {"mid-reply close", MidReplyClose}, {"looping cursor", LoopingCursor},
}

// HugeSize is the size of RealHuge's reply.
const HugeSize = 100 << 20

// LockKey is the one key SCAN returns: a lock, so that the exporter reads
// its value (GETRANGE).
const LockKey = "lock:hostile:1"

// Server is a hostile endpoint.
type Server struct {
	Addr string
	mode Mode
	cmd  string
	// Conns counts the connections accepted; Hostile the hostile replies
	// sent (for LoopingCursor, the SCAN replies).
	Conns, Hostile atomic.Int64
}

// Start serves until the test ends: command (upper case: "INFO",
// "GETRANGE", "SCAN") gets the hostile reply of mode.
func Start(t testing.TB, mode Mode, command string) *Server {
	t.Helper()
	if mode == LoopingCursor {
		command = "SCAN"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: l.Addr().String(), mode: mode, cmd: command}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.Conns.Add(1)
			wg.Go(func() { s.serve(c, done) })
		}
	})
	return s
}

func (s *Server) serve(c net.Conn, done chan struct{}) {
	defer c.Close()
	go func() { <-done; c.Close() }() // a silent reply holds the connection until the test ends
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	for {
		args, err := ReadCommand(r)
		if err != nil {
			return
		}
		cmd := strings.ToUpper(args[0])
		if cmd == s.cmd && s.mode != LoopingCursor {
			s.Hostile.Add(1)
			_ = w.Flush()
			s.hostile(c)
			return
		}
		if _, err := io.WriteString(w, s.answer(cmd, args)); err != nil {
			return
		}
		if r.Buffered() == 0 { // the end of a pipeline
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// hostile writes the hostile reply, then holds the connection (or closes
// it, for MidReplyClose).
func (s *Server) hostile(c net.Conn) {
	switch s.mode {
	case HugeHeader:
		_, _ = io.WriteString(c, "$9223372036854775000\r\n")
	case ClaimedAbsent:
		_, _ = io.WriteString(c, "$4294967296\r\nabc")
	case RealHuge:
		_, _ = io.WriteString(c, "$"+strconv.Itoa(HugeSize)+"\r\n")
		chunk := []byte(strings.Repeat("x", 64<<10))
		for sent := 0; sent < HugeSize; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(c, "\r\n")
	case Garbage:
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nnot redis\r\n")
	case MidReplyClose:
		_, _ = io.WriteString(c, "$100\r\nonly part of it")
		return
	}
	_, _ = io.Copy(io.Discard, c) // silence until the client gives up
}

// answer is the valid reply to a command.
func (s *Server) answer(cmd string, args []string) string {
	switch cmd {
	case "PING":
		return "+PONG\r\n"
	case "AUTH", "SELECT", "CLIENT":
		return "+OK\r\n"
	case "INFO":
		return bulk(info)
	case "SCAN":
		if s.mode == LoopingCursor {
			s.Hostile.Add(1)
			return "*2\r\n$1\r\n7\r\n*1\r\n" + bulk(LockKey)
		}
		return "*2\r\n$1\r\n0\r\n*1\r\n" + bulk(LockKey)
	case "PEXPIRETIME", "PTTL", "TTL":
		return ":-1\r\n"
	case "GETRANGE", "GET":
		return bulk("owner-1")
	case "TYPE":
		return "+string\r\n"
	case "CONFIG":
		return "*0\r\n"
	case "LATENCY":
		return "*0\r\n"
	}
	return fmt.Sprintf("-ERR unknown command '%s'\r\n", strings.ToLower(cmd))
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// info is a minimal INFO reply of a Redis 7 with one key.
var info = strings.Join([]string{
	"# Server", "redis_version:7.2.0", "run_id:" + strings.Repeat("a", 40),
	"# Clients", "connected_clients:1", "blocked_clients:0",
	"# Memory", "used_memory:1000000", "maxmemory:0", "maxmemory_policy:noeviction",
	"# Stats", "keyspace_hits:0", "keyspace_misses:0", "expired_keys:0", "evicted_keys:0",
	"# Replication", "role:master",
	"# Cluster", "cluster_enabled:0",
	"# Keyspace", "db0:keys=1,expires=0,avg_ttl=0", "",
}, "\r\n")

// ReadCommand reads one request, an array of bulk strings, for endpoints
// of tests.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 || line[0] != '*' {
		return nil, fmt.Errorf("bad request %q: %v", line, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 64 {
		return nil, fmt.Errorf("bad request array %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil || line[0] != '$' {
			return nil, fmt.Errorf("bad argument %q: %v", line, err)
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad argument length %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}
