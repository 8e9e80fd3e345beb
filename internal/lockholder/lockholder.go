// Package lockholder gives the value cachewatch stores in the locks it takes:
// who holds the lock (service, host, process id, process instance) and since
// when, beside the unique token that makes release, renewal and fencing
// safe. The value is read back with one GET (or GETRANGE key 0 MaxLen, which
// bounds the reply), and Parse reads it, as well as bsm/redislock's
// token-and-metadata values; any other value is opaque.
//
// # Format
//
// A value is ASCII fields separated by '|', led by the format's version:
//
//	cw1|<token>|<service>|<host>|<pid>|<instance>|<acquired>
//
// token is the acquisition's unique random part (22 base64url characters,
// 128 bits); service the client's Name; host the host name; pid the process
// id (decimal); instance the process instance's random id (11 base64url
// characters, 64 bits), which names its liveness key (AliveKey); acquired
// the acquisition time in unix milliseconds (decimal, the client's clock).
// In token, service and host the bytes '%', '|', '@', space, controls and
// DEL are written %XX, so a value never holds '@' nor a field separator of
// its own; service and host are cut to 64 bytes first. A typical value is
// about 80 bytes (Size).
//
// Scripts compare the whole value, never a part of it, so a value is as
// safe an owner check as the bare token was. What follows an '@' names the
// holder's proof of life: a lock whose holder keeps its liveness key ends
// with a bare '@' (LiveMark: AliveKey(instance) exists while the holder's
// process runs, see Live), and a Cache's refresh claim may follow the value
// with "@<channel>", the channel whose subscriber shows its holder's process
// alive. A lease kept through a failed load's hold-off is led by '!'.
package lockholder

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// Version leads every value this package encodes.
const Version = "cw1"

// MaxLen bounds a value Parse reads: a longer one is opaque. Encode never
// writes one longer. Reading GETRANGE key 0 MaxLen (MaxLen+1 bytes) keeps a
// reply bounded and still tells a longer value apart.
const MaxLen = 512

// maxField bounds service and host before escaping; maxToken a token.
const (
	maxField = 64
	maxToken = 64
)

// Kind says how a lock value was read.
type Kind uint8

// Kinds of lock value.
const (
	// Opaque: a value of no known format (another library's bare token, or
	// a malformed or overlong value): nothing is known of its holder.
	Opaque Kind = iota
	// Cachewatch: this package's format; every field of Holder is set.
	Cachewatch
	// Redislock: bsm/redislock's 22-character token followed by the
	// metadata its caller gave (Holder.Metadata).
	Redislock
)

func (k Kind) String() string {
	switch k {
	case Cachewatch:
		return "cachewatch"
	case Redislock:
		return "redislock"
	}
	return "opaque"
}

// Holder is what a lock value tells of its holder.
type Holder struct {
	Kind     Kind
	Token    string    // the unique part; "" when opaque
	Service  string    // the client's Name (Cachewatch)
	Host     string    // (Cachewatch)
	PID      int       // (Cachewatch)
	Instance string    // the process instance; names its liveness key (Cachewatch)
	Acquired time.Time // (Cachewatch)
	Metadata string    // redislock's metadata, as stored (Redislock)
	// Wake is the wake channel a Cache's refresh claim names after '@'
	// ("" for a lock); HoldOff is true for a lease kept through a failed
	// load's hold-off (led by '!').
	Wake    string
	HoldOff bool
	// Live is true for a value ending with LiveMark: its holder keeps the
	// liveness key AliveKey(Instance) while its process runs and treats
	// its own locks as lost once it cannot prove that, so a lock whose
	// holder's liveness key is gone may be taken over before its TTL.
	Live bool
}

// LiveMark ends the value of a lock whose holder keeps its liveness key.
const LiveMark = "@"

// Identity is a process's part of the values it writes, fixed once: Value
// adds the token and the time of each acquisition.
type Identity struct {
	Service, Host, Instance string
	PID                     int
	mid                     string // "|service|host|pid|instance|", escaped
}

// NewIdentity returns the identity of this process for a client named
// service: its host name, process id and instance id (Instance).
func NewIdentity(service string) *Identity {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return newIdentity(service, host, os.Getpid(), Instance())
}

func newIdentity(service, host string, pid int, instance string) *Identity {
	service, host = cut(service), cut(host)
	var b []byte
	b = append(b, '|')
	b = appendEscaped(b, service)
	b = append(b, '|')
	b = appendEscaped(b, host)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, '|')
	b = appendEscaped(b, instance)
	b = append(b, '|')
	return &Identity{Service: service, Host: host, Instance: instance, PID: pid, mid: string(b)}
}

// Value returns the lock value of an acquisition by this identity with
// token, at at: one allocation.
func (id *Identity) Value(token string, at time.Time) string {
	var buf [160]byte
	return string(id.Append(buf[:0], token, at))
}

// Append appends the lock value of an acquisition with token at at to dst.
func (id *Identity) Append(dst []byte, token string, at time.Time) []byte {
	if len(token) > maxToken {
		token = token[:maxToken]
	}
	dst = append(dst, Version...)
	dst = append(dst, '|')
	dst = appendEscaped(dst, token)
	dst = append(dst, id.mid...)
	return strconv.AppendInt(dst, at.UnixMilli(), 10)
}

// AppendLive appends the value of a lock whose holder keeps its liveness
// key: Append's, followed by LiveMark.
func (id *Identity) AppendLive(dst []byte, token string, at time.Time) []byte {
	return append(id.Append(dst, token, at), LiveMark...)
}

// LiveValue is Value for a holder that keeps its liveness key (AppendLive).
func (id *Identity) LiveValue(token string, at time.Time) string {
	var buf [160]byte
	return string(id.AppendLive(buf[:0], token, at))
}

// Size returns the bytes of this identity's values with a token of
// tokenLen bytes (needing no escape) and a time of 13 digits (2001–2286).
func (id *Identity) Size(tokenLen int) int {
	return len(Version) + 1 + tokenLen + len(id.mid) + 13
}

// NewToken returns a random token of 128 bits, 22 base64url characters.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// instance is this process's instance id: 64 random bits, fixed at start.
var instance = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}()

// Instance returns this process's instance id. Unlike the pid it is not
// reused by a later process, on this host or another.
func Instance() string { return instance }

// cut shortens s to maxField bytes at a rune boundary.
func cut(s string) string {
	if len(s) <= maxField {
		return s
	}
	s = s[:maxField]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

const hexDigits = "0123456789ABCDEF"

// needsEscape reports the bytes written %XX in a field.
func needsEscape(c byte) bool {
	return c <= ' ' || c == 0x7f || c == '%' || c == '|' || c == '@'
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// AlivePrefix leads the names of liveness keys.
const AlivePrefix = "cachewatch:alive:"

// AliveKey names the liveness key of a process instance: a key with a short
// TTL that the process's clients keep refreshing while it runs, so that a
// lock whose holder's key is gone (and whose value is Live) is known to
// have a dead holder. The instance is the key's hash tag: in Redis Cluster
// one slot holds it, wherever the locks are.
func AliveKey(instance string) string {
	return AlivePrefix + "{" + instance + "}"
}
