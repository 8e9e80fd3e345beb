package exporter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrPasswordInURL is returned by ParseURL for a URL that carries a password:
// a URL is given on the command line, where every user of the machine can
// read it. Pass the password through Target.Password instead (the command
// reads it from an environment variable or a file).
var ErrPasswordInURL = errors.New("the Redis URL must not contain a password")

// Mode says whether the target is a Redis Cluster.
type Mode int

// Target modes.
const (
	// ModeAuto asks the first reachable address (INFO cluster) whether it
	// belongs to a Cluster.
	ModeAuto Mode = iota
	// ModeStandalone samples exactly the given addresses.
	ModeStandalone
	// ModeCluster discovers every master from CLUSTER NODES.
	ModeCluster
)

// ErrTLSMismatch marks a connection whose TLS setting does not match the
// server's: rediss:// (TLS) to a plaintext port, or redis:// (plaintext) to
// a port that speaks TLS; the error says which.
var ErrTLSMismatch = errors.New("exporter: TLS mismatch")

// Target says how to reach the Redis to sample.
type Target struct {
	// Addrs are host:port addresses: the standalone servers, or seeds from
	// which the masters of a Cluster are discovered.
	Addrs    []string
	Username string
	// Password is never logged, printed or put in an error.
	Password string
	DB       int
	// TLS, when set, is used for every connection (rediss://).
	TLS  *tls.Config
	Mode Mode
	// DialTimeout and ReadTimeout bound each connection attempt and reply;
	// zero means 2s and 3s.
	DialTimeout, ReadTimeout time.Duration
}

// String describes the target without its password, so that printing a
// Target or Options (%v, %+v) cannot leak it.
func (t Target) String() string {
	pw := ""
	if t.Password != "" {
		pw = " password=<redacted>"
	}
	return fmt.Sprintf("{addrs=%v user=%q db=%d tls=%t mode=%d%s}", t.Addrs, t.Username, t.DB, t.TLS != nil, t.Mode, pw)
}

// ParseURL parses redis://[user@]host[:port][/db] or rediss://… (TLS) into
// a Target; the port defaults to 6379. The query may set dial_timeout and
// read_timeout (positive durations such as 2s).
//
// It refuses, with an error saying what to write instead: a password, in the
// user information or in a query parameter whose name contains "pass" or is
// "auth" (?password=…, ?requirepass=…), wrapping ErrPasswordInURL; a query
// that cannot be parsed (it could hide one) and any other parameter; a
// #fragment; a scheme other than redis or rediss, or none ("did you mean
// redis://host:port?"); a port outside 1–65535; a database that is not a
// number. Errors never repeat the URL's user information or a parameter's
// value.
func ParseURL(raw string) (Target, error) {
	if !strings.Contains(raw, "://") {
		return Target{}, noScheme(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		reason := stripURL(err)
		if strings.Contains(raw, "@") { // the reason may quote part of the user information
			reason = "cannot be parsed"
		}
		return Target{}, badURL(raw, reason)
	}
	if _, has := u.User.Password(); has {
		return Target{}, ErrPasswordInURL
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return Target{}, badURL(raw, "a #fragment is not allowed")
	}
	q, err := checkQuery(u.RawQuery)
	if err != nil {
		return Target{}, err
	}
	t, err := urlTarget(raw, u)
	if err != nil {
		return Target{}, err
	}
	for name, vs := range q {
		if err := urlParams[name](&t, vs[len(vs)-1]); err != nil {
			return Target{}, fmt.Errorf("bad Redis URL parameter %s: %w", name, err)
		}
	}
	return t, nil
}

// urlTarget reads the scheme, address, user and database of a parsed URL.
func urlTarget(raw string, u *url.URL) (Target, error) {
	var t Target
	switch u.Scheme {
	case "redis":
	case "rediss":
		t.TLS = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	default:
		return Target{}, badURL(raw, "scheme must be redis or rediss")
	}
	if u.Host == "" {
		return Target{}, badURL(raw, "no host")
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "6379"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Target{}, badURL(raw, fmt.Sprintf("port %q is outside 1-65535", port))
	}
	t.Addrs = []string{net.JoinHostPort(host, port)}
	t.Username = u.User.Username()
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return Target{}, badURL(raw, fmt.Sprintf("database %q is not a number", db))
		}
		t.DB = n
	}
	return t, nil
}

// badURL quotes raw without its user information, query or fragment:
// none of them reaches an error.
func badURL(raw, reason string) error {
	quoted := redactRaw(raw)
	if i := strings.IndexAny(quoted, "?#"); i >= 0 {
		quoted = quoted[:i]
	}
	return fmt.Errorf("bad Redis URL %q: %s", quoted, reason)
}

// hostPortDB matches what people type for a Redis address without a
// scheme: host, host:port, [v6]:port, optionally /db. Only such text is
// quoted back in the suggestion: anything else might hold a password.
var hostPortDB = regexp.MustCompile(`^[A-Za-z0-9._-]*(\[[0-9A-Fa-f:.]+\])?(:[0-9]+)?(/[0-9]+)?$`)

// noScheme explains a URL without a scheme, suggesting the redis:// one.
func noScheme(raw string) error {
	if raw != "" && hostPortDB.MatchString(raw) {
		return fmt.Errorf("the Redis URL %q has no scheme: did you mean redis://%s?", raw, raw)
	}
	return errors.New("the Redis URL has no scheme: want redis://[user@]host:port[/db] or rediss://… for TLS")
}

// urlParams are the query parameters a Redis URL may carry.
var urlParams = map[string]func(t *Target, v string) error{
	"dial_timeout": func(t *Target, v string) (err error) { t.DialTimeout, err = positiveDuration(v); return err },
	"read_timeout": func(t *Target, v string) (err error) { t.ReadTimeout, err = positiveDuration(v); return err },
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive duration such as 2s")
	}
	return d, nil
}

// checkQuery refuses a password among the query parameters first (so that
// a URL carrying a secret is refused before anything can quote it), then
// any parameter but the known ones, naming the parameter but never its
// value.
func checkQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errors.New("bad Redis URL: the query cannot be parsed") // quoting it could leak a password
	}
	for name := range q {
		if strings.Contains(strings.ToLower(name), "pass") || strings.EqualFold(name, "auth") {
			return nil, fmt.Errorf("%w (parameter %q)", ErrPasswordInURL, name)
		}
	}
	for name := range q {
		if _, ok := urlParams[name]; !ok {
			return nil, fmt.Errorf("unknown Redis URL parameter %q (known: dial_timeout, read_timeout)", name)
		}
	}
	return q, nil
}

// redactRaw hides everything between the scheme and the last "@" of a URL:
// whatever the URL's shape, user information never reaches an error.
func redactRaw(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	if scheme := strings.Index(raw, "://"); scheme >= 0 && scheme < at {
		return raw[:scheme+3] + "xxxxx" + raw[at:]
	}
	return "xxxxx" + raw[at:]
}

// stripURL returns the reason of a url.Error without the URL it quotes.
func stripURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "unparseable"
}

// clientOptions are the go-redis options for one node. Retries are off so a
// failed sample shows as failed instead of being hidden behind retries.
func (t Target) clientOptions(addr string) *redis.Options {
	dial, read := t.dialTimeout(), t.ReadTimeout
	if read == 0 {
		read = 3 * time.Second
	}
	return &redis.Options{
		Addr: addr, Username: t.Username, Password: t.Password, DB: t.DB, Dialer: t.dialer(dial),
		// No client name and RESP2: connecting then needs no command beyond
		// AUTH, so a minimal read-only ACL user works.
		DisableIdentity: true, Protocol: 2,
		DialTimeout: dial, ReadTimeout: read, WriteTimeout: read,
		MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true,
		// One dial attempt: the sampler's own backoff decides when to try again.
		DialerRetries: 1,
	}
}

// dialer connects and, for a TLS target, completes the handshake within the
// dial timeout, so that a TLS client talking to a plaintext port fails at
// once with an error that says so instead of timing out on the first reply.
func (t Target) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || t.TLS == nil {
			return conn, err
		}
		cfg := t.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = conn.Close()
			return nil, tlsError(ctx, addr, timeout, err)
		}
		return tc, nil
	}
}

// tlsError explains a failed handshake. A reply that is not a TLS record, or
// no reply at all, is what a plaintext Redis gives a TLS client; without a
// reply, a plaintext PING on a new connection tells (Redis waits for a line
// it never gets in a ClientHello).
func tlsError(ctx context.Context, addr string, timeout time.Duration, err error) error {
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &rec):
		return fmt.Errorf("%w: %s answered the TLS handshake in plaintext: the port does not speak TLS (use redis://, not rediss://): %v",
			ErrTLSMismatch, addr, err)
	case isTimeout(err), errors.Is(err, context.DeadlineExceeded):
		if answersPlaintext(ctx, addr, timeout) {
			return fmt.Errorf("%w: %s does not speak TLS: it did not answer the TLS handshake in time and answers PING in plaintext (use redis://, not rediss://): %v",
				ErrTLSMismatch, addr, err)
		}
		return fmt.Errorf("%w: %s did not answer the TLS handshake in time: is the port plaintext? (use redis://, not rediss://): %v",
			ErrTLSMismatch, addr, err)
	}
	return fmt.Errorf("exporter: TLS handshake with %s: %w", addr, err)
}

// answersPlaintext reports whether addr answers a plaintext PING with a
// Redis reply (+PONG, or an error such as -NOAUTH). Nothing but PING is sent.
func answersPlaintext(ctx context.Context, addr string, timeout time.Duration) bool {
	// The dial's context has just run out with the handshake: the probe gets
	// a time of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	_, err = io.ReadFull(conn, b[:])
	return err == nil && (b[0] == '+' || b[0] == '-')
}

// plaintextHint explains a plaintext connection that the server closed at
// once. It probes the port with a TLS handshake (certificate not checked,
// nothing sent over it, within the dial timeout): a port that answers in TLS
// is a TLS mismatch, and the error says so (ErrTLSMismatch). A port that
// answers a plaintext PING on a new connection is a plain Redis that reset
// one connection: the error is returned as it is. Only a port that answers
// neither gets the hint that it may expect TLS. Failed connects are
// rate-bounded by the node's backoff, and so are the probes.
func (t Target) plaintextHint(ctx context.Context, addr string, err error) error {
	if t.TLS != nil || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		return err
	}
	if speaksTLS(ctx, addr, t.dialTimeout()) {
		return fmt.Errorf("%w: %s speaks TLS and closed the plaintext connection: use rediss:// (or --redis.tls), not redis://: %w",
			ErrTLSMismatch, addr, err)
	}
	if answersPlaintext(ctx, addr, t.dialTimeout()) {
		return err
	}
	return fmt.Errorf("%w (the server closed the connection: if it expects TLS, use rediss://)", err)
}

// speaksTLS reports whether addr answers a TLS handshake: it completes, or
// the server answers with a TLS alert (it wants a client certificate).
func speaksTLS(ctx context.Context, addr string, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	// Only the handshake runs: no credentials or commands are sent, so the
	// certificate need not be checked.
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = tc.HandshakeContext(hctx)
	var alert tls.AlertError
	return err == nil || errors.As(err, &alert)
}

func (t Target) dialTimeout() time.Duration {
	if t.DialTimeout == 0 {
		return 2 * time.Second
	}
	return t.DialTimeout
}
