package sampler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrBadReply marks a reply the sampler refused before reading it: bytes
// that are not the Redis protocol (RESP), a length out of range, or a reply
// whose declared size exceeds the limit of its command (ErrReplyTooLarge).
// Nothing of it is allocated; the connection is closed. Its class is
// "malformed".
var ErrBadReply = errors.New("exporter: reply refused")

// ErrReplyTooLarge marks a reply whose declared size exceeds the limit of
// its command (Config.MaxInfoReply, MaxQueueReply, MaxReply, or
// MaxTokenBytes for lock values). It wraps ErrBadReply.
var ErrReplyTooLarge = fmt.Errorf("%w: larger than its limit", ErrBadReply)

// errAfterRefusal is the error of every read on a connection after the
// guard refused a reply on it: the replies of the rest of a pipeline.
var errAfterRefusal = fmt.Errorf("%w: an earlier reply on the connection was refused", ErrBadReply)

// Shape limits no Redis reply comes near: they bound what the guard keeps.
const (
	// maxHeader bounds a length or integer line ("$", "*", ":" …).
	maxHeader = 24
	// maxSimpleLine bounds a status or error line ("+…", "-…").
	maxSimpleLine = 64 << 10
	// maxDepth bounds nested aggregates (Redis replies nest a few deep).
	maxDepth = 32
	// elementCost is what each element of an aggregate counts against a
	// reply's limit: the memory a client gives it beyond its bytes.
	elementCost = 16
)

// replyClass is what a reply answers, for its limit: INFO; the lock pass's
// token reads (GETRANGE, at most MaxTokenBytes by what it asks); the reads
// of a queue's entries, whose size the data decides (XRANGE, ZRANGE);
// anything else (a stream's group list too: the soft cap of MaxQueueReply
// leaves it out once read).
type replyClass uint8

const (
	replyOther replyClass = iota
	replyInfo
	replyToken
	replyXRange
	replyZRange
)

var replyCommands = [...]string{replyOther: "", replyInfo: "INFO", replyToken: "GETRANGE",
	replyXRange: "XRANGE", replyZRange: "ZRANGE"}

// classOf returns the class of the reply to a command named name (any
// case).
func classOf(name []byte) replyClass {
	for c, cmd := range replyCommands {
		if c > 0 && len(name) == len(cmd) && asciiEqualFold(name, cmd) {
			return replyClass(c)
		}
	}
	return replyOther
}

func asciiEqualFold(b []byte, upper string) bool {
	for i := range b {
		if c := b[i]; c != upper[i] && c != upper[i]+'a'-'A' {
			return false
		}
	}
	return true
}

// replyLimits are the size limits of replies, by class.
type replyLimits [len(replyCommands)]int64

func (c *Config) replyLimits() replyLimits {
	q := int64(c.MaxQueueReply)
	return replyLimits{replyOther: int64(c.MaxReply), replyInfo: int64(c.MaxInfoReply), replyToken: MaxTokenBytes,
		replyXRange: q, replyZRange: q}
}

// refusal is a refused reply, naming the command it answered.
type refusal struct {
	class replyClass
	err   error
}

func (r *refusal) Error() string {
	msg := r.err.Error()
	if cmd := replyCommands[r.class]; cmd != "" {
		msg = "exporter: reply to " + cmd + " refused" + strings.TrimPrefix(msg, ErrBadReply.Error())
	}
	return msg
}

func (r *refusal) Unwrap() error { return r.err }

// refusedClass returns the class of the reply err refused, if it is one
// the guard refused for its size.
func refusedClass(err error) (replyClass, bool) {
	var r *refusal
	if errors.As(err, &r) && errors.Is(r.err, ErrReplyTooLarge) {
		return r.class, true
	}
	return replyOther, false
}

// client returns a client of one node, its connections guarded
// (guardConn).
func (c *Config) client(addr string) *redis.Client {
	o := c.Conn.clientOptions(addr)
	dial, limits := o.Dialer, c.replyLimits()
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newGuardConn(conn, limits), nil
	}
	return redis.NewClient(o)
}

// guardConn checks the replies on a connection to Redis as they arrive,
// before go-redis reads them: each length header is checked against the
// limit of the command that asked (known from the commands written, in
// order) before go-redis sees the line, and bytes that are not RESP are
// refused. A refused reply ends the connection: go-redis gets ErrBadReply
// (or ErrReplyTooLarge) and never allocates what the header claims.
type guardConn struct {
	net.Conn
	limits replyLimits

	// mu guards the queue of expected replies' limits: a subscription's
	// connection is written to (PING) while another goroutine reads it.
	mu      sync.Mutex
	pending []replyClass
	cmds    respScanner // of the commands written

	// replies follows the replies read (only the reader uses it); fresh
	// is set between two replies.
	replies respScanner
	fresh   bool
	class   replyClass // of the reply being read
	err     error      // once a reply was refused
}

func newGuardConn(c net.Conn, limits replyLimits) *guardConn {
	g := &guardConn{Conn: c, limits: limits, fresh: true}
	g.cmds.command = true
	g.cmds.limit = -1
	return g
}

// Write notes the command of each request written, then writes it.
func (g *guardConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	for rest := p; len(rest) > 0; {
		done, n, err := g.cmds.scan(rest)
		if err != nil { // not a request go-redis would write: stop following commands
			g.cmds = respScanner{command: true, limit: -1}
			break
		}
		if done {
			g.pending = append(g.pending, classOf(g.cmds.nameBuf[:g.cmds.nameN]))
			g.cmds.reset()
		}
		rest = rest[n:]
	}
	g.mu.Unlock()
	return g.Conn.Write(p)
}

// next takes the class of the next reply: that of the oldest command not
// answered yet, or replyOther for a reply no command asked for (a
// subscription's messages).
func (g *guardConn) next() replyClass {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		return replyOther
	}
	c := g.pending[0]
	g.pending = g.pending[1:]
	return c
}

// Read reads from the connection and checks what arrived. Of a read that
// holds the line of a refused reply, only the bytes before that line are
// passed on; the error comes with the next read.
func (g *guardConn) Read(p []byte) (int, error) {
	if g.err != nil {
		err := g.err
		g.err = errAfterRefusal
		return 0, err
	}
	n, err := g.Conn.Read(p)
	for off := 0; off < n; {
		if g.fresh { // a reply starts: to the oldest command not answered yet
			g.class, g.fresh = g.next(), false
			g.replies.limit = g.limits[g.class]
		}
		done, used, serr := g.replies.scan(p[off:n])
		if serr != nil {
			serr = &refusal{class: g.class, err: serr}
			g.err = errAfterRefusal
			if keep := off + g.replies.lineStart; keep > 0 {
				g.err = serr
				return keep, nil
			}
			return 0, serr
		}
		if done {
			g.replies.reset()
			g.fresh = true
		}
		off += used
	}
	return n, err
}

// respScanner follows a RESP stream without keeping it: type bytes, line
// and header lengths, bulk bodies and their CRLF, aggregate counts, and the
// size each value declares against its limit.
type respScanner struct {
	// command makes it follow requests (arrays of bulk strings) and keep
	// the first bytes of each one's first argument, the command's name.
	command bool
	// limit is the size the current value may declare; -1: none.
	limit, used int64

	state scanState
	typ   byte
	// header holds a length or integer line's text, CR included.
	header  [maxHeader]byte
	headerN int
	lineLen int
	last    byte // the line's last byte so far
	body    int64
	// remaining holds, per open aggregate, the elements still to come.
	remaining [maxDepth]int64
	depth     int
	topDone   bool
	// nameBuf holds the start of a request's first argument.
	nameBuf  [16]byte
	nameN    int
	inName   bool
	sawFirst bool
	// lineStart is where, in the last scanned slice, the line being read
	// began (0 when it began in an earlier slice): a refused reply is cut
	// there.
	lineStart int
}

type scanState uint8

const (
	stType scanState = iota // a type byte is next
	stLine                  // inside a line, up to its LF
	stBody                  // inside a bulk body
	stCR                    // the CR after a body
	stLF                    // the LF after a body
)

// reset readies the scanner for the next top-level value.
func (s *respScanner) reset() {
	*s = respScanner{command: s.command, limit: s.limit}
}

// scan consumes p up to the end of the current top-level value (done) or
// of p, and returns how many bytes it consumed.
func (s *respScanner) scan(p []byte) (done bool, n int, err error) {
	s.lineStart = 0
	for n < len(p) && !s.topDone {
		var k int
		switch s.state {
		case stType:
			s.lineStart = n
			err, k = s.startValue(p[n]), 1
		case stLine:
			k, err = s.line(p[n:])
		case stBody:
			k = int(min(s.body, int64(len(p)-n)))
			s.capture(p[n : n+k])
			if s.body -= int64(k); s.body == 0 {
				s.state = stCR
			}
		default:
			err, k = s.crlf(p[n]), 1
		}
		if err != nil {
			return false, n, err
		}
		n += k
	}
	return s.topDone, n, nil
}

// startValue reads a type byte.
func (s *respScanner) startValue(b byte) error {
	switch b {
	case '+', '-', ':', '$', '*', '_', ',', '#', '!', '=', '(', '%', '~', '|', '>':
		if s.command && b != '*' && b != '$' {
			return fmt.Errorf("%w: not a request", ErrBadReply)
		}
		s.typ, s.state, s.headerN, s.lineLen = b, stLine, 0, 0
		return nil
	}
	return fmt.Errorf("%w: not a Redis reply (byte 0x%02x where a reply starts)", ErrBadReply, b)
}

// crlf reads the CR and LF after a bulk body.
func (s *respScanner) crlf(b byte) error {
	want := byte('\r')
	if s.state == stLF {
		want = '\n'
	}
	if b != want {
		return fmt.Errorf("%w: a bulk string is longer than its length says (byte 0x%02x after it)", ErrBadReply, b)
	}
	if s.state == stCR {
		s.state = stLF
		return nil
	}
	s.state = stType
	s.valueDone()
	return nil
}

// line consumes a line's bytes up to its LF, then handles it.
func (s *respScanner) line(p []byte) (int, error) {
	header := s.isHeader()
	for i, b := range p {
		if b == '\n' {
			if s.lineLen == 0 || s.last != '\r' {
				return i, fmt.Errorf("%w: a line does not end in CRLF", ErrBadReply)
			}
			s.state = stType
			return i + 1, s.endLine()
		}
		s.lineLen++
		s.last = b
		switch {
		case header && s.headerN == maxHeader:
			return i, fmt.Errorf("%w: a %q length of over %d bytes", ErrBadReply, s.typ, maxHeader-1)
		case header:
			s.header[s.headerN] = b
			s.headerN++
		case s.lineLen > maxSimpleLine || s.over(int64(s.lineLen)):
			return i, fmt.Errorf("%w: a line of over %d bytes", ErrReplyTooLarge, s.lineLen-1)
		}
	}
	return len(p), nil
}

// isHeader reports whether the line's text is a length or an integer.
func (s *respScanner) isHeader() bool {
	switch s.typ {
	case '$', '*', ':', '!', '=', '%', '~', '|', '>':
		return true
	}
	return false
}

// over reports whether n more bytes would take the value past its limit.
func (s *respScanner) over(n int64) bool {
	return s.limit >= 0 && s.used+n > s.limit
}

// endLine handles a complete line: a scalar ends a value; a length starts
// a body or an aggregate, each checked against the value's limit.
func (s *respScanner) endLine() error {
	if !s.isHeader() {
		s.used += int64(s.lineLen)
		s.valueDone()
		return nil
	}
	n, err := s.number()
	switch {
	case err != nil:
		return err
	case s.typ == ':':
		s.valueDone()
		return nil
	case s.typ == '$', s.typ == '!', s.typ == '=':
		return s.startBody(n)
	}
	return s.startAggregate(n)
}

// number parses the header's text (its CR left out) as a decimal integer.
func (s *respScanner) number() (int64, error) {
	text := s.header[:s.headerN-1]
	digits := text
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	var v int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			digits = nil
			break
		}
		v = min(v*10+int64(c-'0'), 1<<53) // past any limit: saturated, never overflowing
	}
	if len(digits) == 0 {
		return 0, fmt.Errorf("%w: %q length %.24q is not a number", ErrBadReply, s.typ, text)
	}
	if text[0] == '-' {
		v = -v
	}
	return v, nil
}

func (s *respScanner) startBody(n int64) error {
	switch {
	case n == -1 && s.typ == '$':
		s.valueDone()
		return nil
	case n < 0:
		return fmt.Errorf("%w: %q length %d", ErrBadReply, s.typ, n)
	case s.over(n):
		return fmt.Errorf("%w: a %d-byte string where the reply may hold %d more bytes", ErrReplyTooLarge, n, s.limit-s.used)
	}
	s.used += n
	s.body, s.state = n, stBody
	s.inName = s.command && s.depth == 1 && !s.sawFirst
	if n == 0 {
		s.state = stCR
	}
	return nil
}

func (s *respScanner) startAggregate(n int64) error {
	switch s.typ {
	case '%':
		n *= 2
	case '|': // attributes, then the value they describe
		n = 2*n + 1
	}
	switch {
	case n == -1 && (s.typ == '*' || s.typ == '>'):
		s.valueDone()
		return nil
	case n < 0:
		return fmt.Errorf("%w: %q count %d", ErrBadReply, s.typ, n)
	case s.over(n * elementCost):
		return fmt.Errorf("%w: %d elements where the reply may hold %d more bytes", ErrReplyTooLarge, n, s.limit-s.used)
	case s.depth == maxDepth:
		return fmt.Errorf("%w: aggregates nested over %d deep", ErrBadReply, maxDepth)
	case s.command && (s.typ != '*' || s.depth > 0):
		return fmt.Errorf("%w: not a request", ErrBadReply)
	}
	s.used += n * elementCost
	if n == 0 {
		s.valueDone()
		return nil
	}
	s.remaining[s.depth] = n
	s.depth++
	return nil
}

// capture keeps the start of a request's first argument.
func (s *respScanner) capture(b []byte) {
	if s.inName {
		s.nameN += copy(s.nameBuf[s.nameN:], b)
	}
}

// valueDone ends a value: it counts as one element of the aggregate it is
// in, which may end in turn; a top-level value ends the scan.
func (s *respScanner) valueDone() {
	if s.inName {
		s.inName, s.sawFirst = false, true
	}
	for s.depth > 0 {
		if s.remaining[s.depth-1]--; s.remaining[s.depth-1] > 0 {
			return
		}
		s.depth--
	}
	s.topDone = true
}
