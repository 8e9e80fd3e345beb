package sampler

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode says whether the target is a Redis Cluster.
type Mode string

// Target modes.
const (
	// ModeAuto asks the first reachable address (INFO cluster) whether it
	// belongs to a Cluster.
	ModeAuto Mode = "auto"
	// ModeStandalone samples exactly the given addresses.
	ModeStandalone Mode = "standalone"
	// ModeCluster discovers every master from CLUSTER NODES.
	ModeCluster Mode = "cluster"
)

// ErrTLSMismatch marks a connection whose TLS setting does not match the
// server's: rediss:// (TLS) to a plaintext port, or redis:// (plaintext) to
// a port that speaks TLS; the error says which.
var ErrTLSMismatch = errors.New("exporter: TLS mismatch")

// Conn says how to reach the nodes of a target.
type Conn struct {
	// Addrs are host:port addresses: the standalone servers, or seeds from
	// which the masters of a Cluster are discovered.
	Addrs    []string
	Username string
	// Password is never logged, printed or put in an error.
	Password string
	DB       int
	// TLS, when set, is used for every connection.
	TLS  *tls.Config
	Mode Mode
	// DialTimeout and ReadTimeout bound each connection attempt and reply;
	// zero means 2s and 3s.
	DialTimeout, ReadTimeout time.Duration
}

// clientOptions are the go-redis options for one node. Retries are off so a
// failed sample shows as failed instead of being hidden behind retries.
func (t *Conn) clientOptions(addr string) *redis.Options {
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
func (t *Conn) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
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
func (t *Conn) plaintextHint(ctx context.Context, addr string, err error) error {
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

func (t *Conn) dialTimeout() time.Duration {
	if t.DialTimeout == 0 {
		return 2 * time.Second
	}
	return t.DialTimeout
}
