package exporter

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
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
