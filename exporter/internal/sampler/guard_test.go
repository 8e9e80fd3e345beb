package sampler

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
)

// pipeConn is one end of an in-memory connection whose other end writes
// what the test says.
func guarded(t *testing.T, limits replyLimits, commands, replies string) ([]byte, error) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	g := newGuardConn(client, limits)
	go func() {
		defer server.Close()
		buf := make([]byte, len(commands))
		if _, err := io.ReadFull(server, buf); err != nil {
			return
		}
		// Write in pieces of random sizes: headers split across reads.
		r := rand.New(rand.NewPCG(uint64(len(replies)), 1))
		for rest := []byte(replies); len(rest) > 0; {
			n := min(1+r.IntN(7), len(rest))
			if _, err := server.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
	}()
	if _, err := g.Write([]byte(commands)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 5)
	for {
		n, err := g.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			return got.Bytes(), nil
		}
		if err != nil {
			return got.Bytes(), err
		}
	}
}

func request(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

var testLimits = replyLimits{replyOther: 10_000, replyInfo: 100, replyToken: 8, replyXRange: 60, replyZRange: 60}

// Replies within their limits pass through unchanged, whatever their type
// (RESP2 and RESP3), nesting and the way they are cut into reads.
func TestGuardPassesValidReplies(t *testing.T) {
	replies := "+OK\r\n" + "-ERR no\r\n" + ":-12\r\n" + "$5\r\nhello\r\n" + "$-1\r\n" + "*-1\r\n" + "*0\r\n" +
		"*2\r\n$1\r\na\r\n*2\r\n:1\r\n$0\r\n\r\n" + "%1\r\n+k\r\n,1.5\r\n" + "|1\r\n+a\r\n+b\r\n#t\r\n" +
		"~1\r\n_\r\n" + "=7\r\ntxt:abc\r\n" + "(123\r\n" + "!3\r\nerr\r\n" + "$8\r\n12345678\r\n" + "$50\r\n" + strings.Repeat("i", 50) + "\r\n"
	cmds := strings.Repeat(request("PING"), 14) + request("GETRANGE", "k", "0", "7") + request("info")
	got, err := guarded(t, testLimits, cmds, replies)
	if err != nil || string(got) != replies {
		t.Fatalf("got %q, %v; want the replies unchanged", got, err)
	}
}

// Each hostile reply is refused before its line reaches the reader, with
// ErrReplyTooLarge for a size over the limit of the command it answers,
// ErrBadReply for what is not RESP; replies before it pass.
func TestGuardRefusesHostileReplies(t *testing.T) {
	for _, c := range []struct {
		name, cmds, replies string
		tooLarge            bool
	}{
		{"huge header", request("INFO"), "$9223372036854775000\r\n", true},
		{"header beyond int64", request("PING"), "$99999999999999999999999\r\n", true},
		{"claimed 4 GiB", request("PING"), "$4294967296\r\nabc", true},
		{"INFO over its limit", request("INFO"), "$101\r\n", true},
		{"token over its limit", request("GETRANGE", "lock:1", "0", "255"), "$9\r\n123456789\r\n", true},
		{"queue entry over its limit", request("XRANGE", "q", "-", "+", "COUNT", "1"), "*1\r\n*2\r\n$60\r\n", true},
		{"bulk refused after its array", request("XRANGE", "q", "-", "+", "COUNT", "1"), "*1\r\n$99\r\n", true},
		{"array count over the limit", request("PING"), "*1000000000\r\n", true},
		{"nested too deep", request("PING"), strings.Repeat("*1\r\n", 40), false},
		{"not RESP", request("PING"), "HTTP/1.1 400 Bad Request\r\n", false},
		{"negative length", request("PING"), "$-7\r\n", false},
		{"body longer than its length", request("PING"), "$2\r\nabc\r\n", false},
		{"line without CR", request("PING"), "+OK\n", false},
		{"endless line", request("PING"), "+" + strings.Repeat("x", maxSimpleLine+10), true},
		{"header not a number", request("PING"), "$12ab\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := guarded(t, testLimits, request("PING")+c.cmds, "+PONG\r\n"+c.replies)
			if !errors.Is(err, ErrBadReply) || errors.Is(err, ErrReplyTooLarge) != c.tooLarge {
				t.Fatalf("err %v; want ErrBadReply, too large %v", err, c.tooLarge)
			}
			if !strings.HasPrefix(string(got), "+PONG\r\n") || string(got) == "+PONG\r\n"+c.replies {
				t.Fatalf("passed on %q", got)
			}
			if !strings.HasPrefix("+PONG\r\n"+c.replies, string(got)) {
				t.Fatalf("passed on %q, not a prefix of what was sent", got)
			}
			// A refused length never reaches the reader whole.
			if i := strings.LastIndex(c.replies, "\r\n"); c.tooLarge && i >= 0 {
				refused := c.replies[strings.LastIndex(c.replies[:i], "\n")+1 : i+2]
				if strings.HasPrefix(refused, "$") || strings.HasPrefix(refused, "*") {
					if strings.HasSuffix(string(got), refused) || strings.Contains(string(got), "\n"+refused) {
						t.Fatalf("the refused line %q reached the reader: %q", refused, got)
					}
				}
			}
		})
	}
}

// The replies of a pipeline are matched to their commands in order: a
// token read's reply is held to the token limit, the others to theirs.
func TestGuardFollowsPipelines(t *testing.T) {
	cmds := request("PEXPIRETIME", "lock:1") + request("GETRANGE", "lock:1", "0", "255") + request("PEXPIRETIME", "lock:2") +
		request("GETRANGE", "lock:2", "0", "255")
	ok := ":-1\r\n$8\r\nowner-a1\r\n:-1\r\n$8\r\nowner-b2\r\n"
	if got, err := guarded(t, testLimits, cmds, ok); err != nil || string(got) != ok {
		t.Fatalf("got %q, %v", got, err)
	}
	// The same 9-byte value answering PEXPIRETIME (limit 200) is fine,
	// answering GETRANGE (limit 8) is refused.
	_, err := guarded(t, testLimits, cmds, ":-1\r\n$8\r\nowner-a1\r\n:-1\r\n$9\r\nowner-b22\r\n")
	if c, ok := refusedClass(err); !ok || c != replyToken {
		t.Fatalf("err %v; want the GETRANGE reply refused", err)
	}
}

func FuzzGuard(f *testing.F) {
	f.Add([]byte("*2\r\n$1\r\na\r\n:1\r\n"))
	f.Add([]byte("$9223372036854775000\r\n"))
	f.Add([]byte("%1\r\n|1\r\n+a\r\n+b\r\n+c\r\n:2\r\n"))
	f.Fuzz(func(t *testing.T, replies []byte) {
		var s respScanner
		s.limit = 1 << 10
		rest := replies
		for len(rest) > 0 {
			done, n, err := s.scan(rest)
			if err != nil {
				return
			}
			if n == 0 && !done {
				t.Fatalf("no progress on %q", rest)
			}
			if done {
				s.reset()
			}
			rest = rest[n:]
		}
	})
}
