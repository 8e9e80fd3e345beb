package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/keygroup"
)

// PasswordEnv names the environment variable holding the Redis password.
// The password is never a flag: flags show in ps and shell history.
const PasswordEnv = "CACHEWATCH_REDIS_PASSWORD"

// listFlag is a repeatable flag that also splits on commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// IsCumulative tells kingpin the flag may be repeated.
func (l *listFlag) IsCumulative() bool { return true }

// redisFlags are the connection and sampling flags shared by exporter and doctor.
type redisFlags struct {
	url, urlAlias, user, passwordFile, mode string
	// passwordEnv names the variable holding the password (PasswordEnv
	// unless a targets file names another, or none: noPasswordEnv).
	passwordEnv                          string
	noPasswordEnv                        bool
	addrs, lockPatterns, queues, rules   listFlag
	tls, tlsSkipVerify                   bool
	tlsCA, tlsServerName                 string
	maxKeys, scanCount, batch, maxGroups int
	// minKeys is --keygroup.min-keys; minKeysDefault its default for the
	// command (0: keygroup.DefaultMinKeys).
	minKeys, minKeysDefault             int
	lockGroups, maxLocks, memorySample  int
	lockHolders                         int
	maxReply, maxInfoReply, maxAnyReply int
	maxDuration                         time.Duration
	maxDurationSet                      bool
	keysPerSecond, scanBudget           float64
	// keysPerSecondDefault is --sample.keys-per-second's default for the
	// command (0: the exporter's).
	keysPerSecondDefault float64
	// logger receives the warnings about the flags' files; warned holds
	// the password files warned about (shared by the targets' copies).
	logger *slog.Logger
	warned map[string]bool
}

// setLogger gives the flags the command's logger, for warnings about the
// files they name.
func (f *redisFlags) setLogger(l *slog.Logger) { f.logger, f.warned = l, map[string]bool{} }

func (f *redisFlags) register(cmd *kingpin.CmdClause) {
	cmd.Flag("redis.addr", "Redis host:port (repeat or comma-separate; Cluster seeds); default localhost:6379.").
		PlaceHolder("HOST:PORT").SetValue(&f.addrs)
	cmd.Flag("redis.url", "Redis URL redis://[user@]host:port[/db] or rediss:// for TLS; never a password in it.").
		PlaceHolder("URL").StringVar(&f.url)
	cmd.Flag("redis", "Same as --redis.url (kept for older scripts).").Hidden().StringVar(&f.urlAlias)
	cmd.Flag("redis.user", "Redis ACL user.").PlaceHolder("USER").StringVar(&f.user)
	cmd.Flag("redis.password-file", "File holding the Redis password (else $"+PasswordEnv+").").
		PlaceHolder("FILE").StringVar(&f.passwordFile)
	cmd.Flag("redis.mode", "auto (ask INFO cluster), standalone or cluster.").
		Default("auto").EnumVar(&f.mode, "auto", "standalone", "cluster")
	cmd.Flag("redis.tls", "Connect with TLS (implied by rediss://).").BoolVar(&f.tls)
	cmd.Flag("redis.tls-ca-file", "PEM file of CAs that sign the Redis server certificate.").
		PlaceHolder("FILE").StringVar(&f.tlsCA)
	cmd.Flag("redis.tls-server-name", "Server name to verify in the Redis certificate.").PlaceHolder("NAME").StringVar(&f.tlsServerName)
	cmd.Flag("redis.tls-insecure-skip-verify", "Do not verify the Redis certificate (testing only).").BoolVar(&f.tlsSkipVerify)
	cmd.Flag("locks.pattern", "Glob of lock keys (repeatable); default "+exporterDefaults.Locks.Patterns[0]+".").
		PlaceHolder("GLOB").SetValue(&f.lockPatterns)
	cmd.Flag("queue", "List, stream or sorted-set key to report as a queue (repeatable).").
		PlaceHolder("KEY").SetValue(&f.queues)
	cmd.Flag("keygroup.rule", "glob=group rule for key groups (repeatable); other keys get groups learnt from the keyspace.").
		PlaceHolder("GLOB=GROUP").SetValue(&f.rules)
	cmd.Flag("keygroup.max-groups", "Cap on distinct key groups; the rest fold into other.").
		Default(strconv.Itoa(keygroup.DefaultMaxGroups)).IntVar(&f.maxGroups)
	minKeys := cmp.Or(f.minKeysDefault, keygroup.DefaultMinKeys)
	cmd.Flag("keygroup.min-keys", "Distinct keys that must share a name (at its place in the key) before it appears in a key group, and share a group before it is exported; until then their keys count as other. 1 keeps every name at once.").
		Default(strconv.Itoa(minKeys)).IntVar(&f.minKeys)
	cmd.Flag("sample.max-keys", "Keys read per node per sample; SCAN resumes next sample.").
		Default(strconv.Itoa(exporterDefaults.Sample.MaxKeys)).IntVar(&f.maxKeys)
	cmd.Flag("sample.max-duration", "Time spent scanning per node per sample (at most 90% of the interval; default 13s or less).").
		PlaceHolder(exporterDefaults.Sample.MaxDuration.String()).IsSetByUser(&f.maxDurationSet).DurationVar(&f.maxDuration)
	cmd.Flag("sample.scan-count", "SCAN COUNT hint of the whole-keyspace pass and of a reconciling lock pass.").Default(strconv.Itoa(exporterDefaults.Sample.ScanCount)).IntVar(&f.scanCount)
	cmd.Flag("sample.batch", "Keys read per pipeline.").Default(strconv.Itoa(exporterDefaults.Sample.Batch)).IntVar(&f.batch)
	cmd.Flag("sample.keys-per-second", "Pace key reads to at most this rate per node (negative: unpaced).").
		Default(strconv.FormatFloat(cmp.Or(f.keysPerSecondDefault, exporterDefaults.Sample.KeysPerSecond), 'f', -1, 64)).Float64Var(&f.keysPerSecond)
	cmd.Flag("locks.scan-budget", "Share (0-1] of the server's time the lock pass's SCAN may take.").
		Default(strconv.FormatFloat(exporterDefaults.Locks.ScanBudget, 'f', -1, 64)).Float64Var(&f.scanBudget)
	cmd.Flag("locks.max-tracked", "Lock keys indexed per node; with more, lock series are left out.").
		Default(strconv.Itoa(exporterDefaults.Locks.MaxTracked)).IntVar(&f.maxLocks)
	cmd.Flag("locks.holders", "Longest-held locks per lock group whose holder (service, host) is exported (negative: none).").
		Default(strconv.Itoa(exporterDefaults.Locks.Holders)).IntVar(&f.lockHolders)
	cmd.Flag("locks.max-groups", "Cap on distinct lock groups, apart from --keygroup.max-groups; the rest fold into other.").
		Default(strconv.Itoa(keygroup.DefaultMaxGroups)).IntVar(&f.lockGroups)
	cmd.Flag("keys.memory-sample", "Read MEMORY USAGE of one key in N in the keyspace pass, for memory per key group (0: off).").
		Default("0").IntVar(&f.memorySample)
	cmd.Flag("queue.max-reply-bytes", "Bytes above which a queue read's reply (first stream entry, group list, first delayed job) is refused unread and that read left out for a backoff.").
		Default(strconv.Itoa(exporterDefaults.MaxQueueReply)).IntVar(&f.maxReply)
	cmd.Flag("server.max-info-bytes", "Bytes above which an INFO reply is refused unread: the node is down (class malformed).").
		Default(strconv.Itoa(exporterDefaults.MaxInfoReply)).IntVar(&f.maxInfoReply)
	cmd.Flag("sample.max-reply-bytes", "Bytes above which any other reply (SCAN page, CONFIG, CLUSTER NODES, LATENCY, events; lock values are read up to 256 bytes) is refused unread: the node is down (class malformed).").
		Default(strconv.Itoa(exporterDefaults.Sample.MaxReplyBytes)).IntVar(&f.maxAnyReply)
}

// options builds exporter options from the flags, reading the password from
// the file or the environment. Errors name the flag and never contain the
// password.
func (f *redisFlags) options() (exporter.Options, error) {
	t, err := f.target()
	if err != nil {
		return exporter.Options{}, err
	}
	if err := f.checkRanges(); err != nil {
		return exporter.Options{}, err
	}
	groups, err := f.classifier()
	if err != nil {
		return exporter.Options{}, err
	}
	lockGroups, err := f.classifierCapped(f.lockGroups)
	if err != nil {
		return exporter.Options{}, err
	}
	return exporter.Options{
		Target:        t,
		Queues:        f.queues,
		KeyGroups:     groups,
		MemorySample:  f.memorySample,
		MaxQueueReply: f.maxReply,
		MaxInfoReply:  f.maxInfoReply,
		Sample: exporter.SampleOptions{MaxKeys: f.maxKeys, MaxDuration: f.maxDuration, ScanCount: f.scanCount, Batch: f.batch,
			KeysPerSecond: f.keysPerSecond, MaxReplyBytes: f.maxAnyReply},
		Locks: exporter.LockOptions{Patterns: f.lockPatterns, Groups: lockGroups, ScanBudget: f.scanBudget,
			MaxTracked: f.maxLocks, Holders: f.lockHolders},
	}, nil
}

// checkRanges refuses counts, durations and shares out of range, naming the flag.
func (f *redisFlags) checkRanges() error {
	for _, n := range []struct {
		name string
		v    int
	}{{"sample.max-keys", f.maxKeys}, {"sample.scan-count", f.scanCount}, {"sample.batch", f.batch}, {"keygroup.max-groups", f.maxGroups},
		{"locks.max-groups", f.lockGroups}, {"locks.max-tracked", f.maxLocks}, {"queue.max-reply-bytes", f.maxReply},
		{"server.max-info-bytes", f.maxInfoReply}, {"sample.max-reply-bytes", f.maxAnyReply},
		{"keygroup.min-keys", f.minKeys}} {
		if n.v <= 0 {
			return fmt.Errorf("--%s must be positive, got %d", n.name, n.v)
		}
	}
	switch {
	case f.minKeys > keygroup.MaxMinKeys:
		return fmt.Errorf("--keygroup.min-keys must be at most %d, got %d", keygroup.MaxMinKeys, f.minKeys)
	case f.maxDurationSet && f.maxDuration <= 0:
		return fmt.Errorf("--sample.max-duration must be positive, got %s", f.maxDuration)
	case !(f.scanBudget > 0 && f.scanBudget <= 1):
		return fmt.Errorf("--locks.scan-budget must be in (0, 1], got %g", f.scanBudget)
	case f.memorySample < 0:
		return fmt.Errorf("--keys.memory-sample must not be negative, got %d", f.memorySample)
	}
	return nil
}

// target builds the connection target from the URL or address flags.
func (f *redisFlags) target() (exporter.Target, error) {
	var t exporter.Target
	rawURL := f.url
	switch {
	case f.urlAlias != "" && f.url != "" && f.urlAlias != f.url:
		return t, errors.New("--redis and --redis.url disagree; set only --redis.url")
	case f.urlAlias != "":
		rawURL = f.urlAlias
	}
	switch {
	case rawURL != "" && len(f.addrs) > 0:
		return t, errors.New("--redis.url and --redis.addr: set one, not both")
	case rawURL != "":
		var err error
		if t, err = exporter.ParseURL(rawURL); err != nil {
			return t, urlError("--redis.url", err)
		}
	case len(f.addrs) > 0:
		for _, a := range f.addrs {
			if err := checkHostPort(a); err != nil {
				return t, fmt.Errorf("--redis.addr %q: %w", a, err)
			}
		}
		t.Addrs = f.addrs
	default:
		t.Addrs = []string{"localhost:6379"}
	}
	if f.user != "" {
		t.Username = f.user
	}
	switch f.mode {
	case "standalone":
		t.Mode = exporter.ModeStandalone
	case "cluster":
		t.Mode = exporter.ModeCluster
	}
	pw, err := f.password()
	if err != nil {
		return t, err
	}
	t.Password = pw
	return t, f.tlsConfig(&t)
}

// checkHostPort accepts host:port with a port in 1–65535.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	return checkPort(port)
}

func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is outside 1-65535", port)
	}
	return nil
}

// urlError names the flag of a refused URL and, for a password in it,
// says where the password goes instead.
func urlError(flag string, err error) error {
	if errors.Is(err, exporter.ErrPasswordInURL) {
		return fmt.Errorf("%s: %w: use $%s or --redis.password-file", flag, err, PasswordEnv)
	}
	return fmt.Errorf("%s: %w", flag, err)
}

func (f *redisFlags) password() (string, error) {
	name := f.passwordEnv
	if name == "" && !f.noPasswordEnv {
		name = PasswordEnv
	}
	env := ""
	if name != "" {
		env = os.Getenv(name)
	}
	if f.passwordFile == "" {
		return env, nil
	}
	if env != "" {
		return "", fmt.Errorf("set $%s or --redis.password-file, not both", name)
	}
	b, err := os.ReadFile(f.passwordFile)
	if err != nil {
		return "", fmt.Errorf("--redis.password-file: %w", err)
	}
	f.warnReadableByAll(f.passwordFile)
	return strings.TrimRight(string(b), "\r\n"), nil
}

// warnReadableByAll warns, once per file, when every user of the machine
// may read the password file (its mode gives others read access). The
// password itself is never logged.
func (f *redisFlags) warnReadableByAll(path string) {
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o004 == 0 || f.logger == nil || f.warned[path] {
		return
	}
	f.warned[path] = true
	f.logger.Warn("the Redis password file is readable by every user of this machine: make it readable by the exporter's user only (chmod 600, or 640 for a group)",
		"file", path, "mode", info.Mode().Perm().String())
}

func (f *redisFlags) tlsConfig(t *exporter.Target) error {
	if !f.tls && f.tlsCA == "" && f.tlsServerName == "" && !f.tlsSkipVerify {
		return nil
	}
	if t.TLS == nil {
		t.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if f.tlsServerName != "" {
		t.TLS.ServerName = f.tlsServerName
	}
	t.TLS.InsecureSkipVerify = f.tlsSkipVerify
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return fmt.Errorf("--redis.tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--redis.tls-ca-file %s: no PEM certificate in it", f.tlsCA)
		}
		t.TLS.RootCAs = pool
	}
	return nil
}

func (f *redisFlags) classifier() (*keygroup.Classifier, error) {
	return f.classifierCapped(f.maxGroups)
}

// classifierCapped builds a classifier of the --keygroup.rule rules with
// the given cap.
func (f *redisFlags) classifierCapped(maxGroups int) (*keygroup.Classifier, error) {
	var rules []keygroup.Rule
	for _, r := range f.rules {
		glob, group, ok := strings.Cut(r, "=")
		if !ok || glob == "" || group == "" {
			return nil, fmt.Errorf("--keygroup.rule %q: want glob=group", r)
		}
		rules = append(rules, keygroup.Glob(glob, group))
	}
	return keygroup.New(keygroup.Options{Rules: rules, MaxGroups: maxGroups, MinKeys: f.minKeys})
}

// urlPattern finds URLs in free text (errors, go-redis log lines).
var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`)

// redact hides the user information and query values of every URL in s,
// so that no password reaches a log line or an error, whatever its shape.
// Usage notation such as redis://[user@]host:port[/db] is left alone: an
// "@" inside an open bracket is an optional part of a placeholder, not the
// end of user information.
func redact(s string) string {
	return urlPattern.ReplaceAllStringFunc(s, func(raw string) string {
		scheme, rest, _ := strings.Cut(raw, "://")
		if at := strings.LastIndexByte(rest, '@'); at >= 0 && !insideBrackets(rest[:at]) {
			rest = "xxxxx" + rest[at:]
		}
		if q := strings.IndexByte(rest, '?'); q >= 0 && q < len(rest)-1 { // not a question mark ending a sentence
			rest = rest[:q] + "?xxxxx"
		}
		return scheme + "://" + rest
	})
}

// insideBrackets reports whether s ends inside an unclosed "[".
func insideBrackets(s string) bool {
	return strings.LastIndexByte(s, '[') > strings.LastIndexByte(s, ']')
}

// redactErr is redact for an error's text.
func redactErr(err error) string { return redact(err.Error()) }
