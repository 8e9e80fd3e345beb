// Package sampler samples the Redis nodes of one target for the exporter
// and the doctor: a Sampler per target discovers its nodes (the masters of
// a Cluster) and samples each of them through one value per stage — server
// info, latency, queues, the lock index and the whole-keyspace pass — each
// owning its state, pacing and backoff. What a sample found is published as
// snapshot values; nothing here knows about metrics.
package sampler

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cachewatch/cachewatch/keygroup"
)

// Config configures a Sampler. Every field is set (the exporter's Options
// with their defaults applied), but for HotKeys, MemorySample, MissBurst
// and Queues, whose zero values turn their work off.
type Config struct {
	Conn Conn
	// MaxInfoReply bounds an INFO reply, MaxQueueReply a queue read whose
	// size the data decides, MaxReply any other reply but lock values (at
	// most MaxTokenBytes), in bytes.
	MaxInfoReply, MaxQueueReply, MaxReply int

	// Interval is the time between samples; MaxDuration, MaxKeys bound one
	// sample's share of the whole-keyspace pass (and MaxDuration the lock
	// pass's) of one node.
	Interval, MaxDuration time.Duration
	MaxKeys               int
	// ScanCount is the COUNT of the whole-keyspace pass's SCAN, Batch the
	// keys read per pipeline.
	ScanCount, Batch int
	// KeysPerSecond paces the whole-keyspace pass; Unpaced turns the pacing
	// of both passes off.
	KeysPerSecond float64
	Unpaced       bool
	// KeyGroups classifies keys; MemorySample > 0 reads MEMORY USAGE of
	// one key in MemorySample; HotKeys > 0 keeps the top HotKeys keys by
	// OBJECT FREQ under an LFU policy.
	KeyGroups    *keygroup.Classifier
	MemorySample int
	HotKeys      int

	// LockPatterns are the globs of lock keys, LockGroups their
	// classifier.
	LockPatterns []string
	LockGroups   *keygroup.Classifier
	// Notify says whether the lock index follows keyspace notifications.
	Notify Notify
	// LockScanBudget is the share of the server's time the lock pass's
	// SCAN may take; LockReconcile how long a reconciling pass may take
	// once notifications keep the index exact; LockScanCount the COUNT of
	// the lock pass (of a reconciling pass, ScanCount if larger).
	LockScanBudget float64
	LockReconcile  time.Duration
	LockScanCount  int
	// MaxLocks bounds the lock keys indexed per node; LongHeld is how long
	// an owner token must stay for its lock to be long-held.
	MaxLocks int
	LongHeld time.Duration
	// LockHolders is how many of each lock group's longest-held locks a
	// snapshot names the holders of (GroupStats.Holders); 0 none.
	LockHolders int

	// Queues are the queue keys to report on.
	Queues []string
	// MissBurst > 0 counts a miss burst for each sample in which the
	// server's keyspace misses (corrected) grew by at least MissBurst.
	MissBurst uint64

	// Clock is the clock of ages, deadlines, backoffs and Run's ticker;
	// Pacer the clock of pacing and of the per-sample time budget (the real
	// one but in tests: they bound the load on Redis).
	Clock, Pacer clockwork.Clock
	Logger       *slog.Logger
}

// WithDefaults returns c with the defaults set where c has zero values (or,
// for counts and durations, negative ones): MaxDuration at most 90 % of
// Interval, a lock pattern, key group classifiers, real clocks and
// slog.Default(). A LockScanBudget outside (0, 1] is the default.
func (c Config) WithDefaults() (Config, error) {
	if len(c.LockPatterns) == 0 {
		c.LockPatterns = []string{DefaultLockPattern}
	}
	setDefault(&c.Conn.DialTimeout, DefaultDialTimeout)
	setDefault(&c.Conn.ReadTimeout, DefaultReadTimeout)
	setDefault(&c.Interval, DefaultInterval)
	setDefault(&c.MaxKeys, DefaultMaxKeys)
	setDefault(&c.MaxDuration, DefaultMaxDuration)
	c.MaxDuration = min(c.MaxDuration, c.Interval*9/10)
	setDefault(&c.ScanCount, DefaultScanCount)
	setDefault(&c.Batch, DefaultBatch)
	setDefault(&c.LockScanCount, DefaultLockScanCount)
	setDefault(&c.LongHeld, DefaultLongHeld)
	setDefault(&c.LockReconcile, DefaultLockReconcile)
	setDefault(&c.MaxLocks, DefaultMaxLocks)
	setDefault(&c.MaxQueueReply, DefaultMaxQueueReply)
	setDefault(&c.MaxInfoReply, DefaultMaxInfoReply)
	setDefault(&c.MaxReply, DefaultMaxReply)
	setDefault(&c.KeysPerSecond, DefaultKeysPerSecond)
	if c.LockScanBudget <= 0 || c.LockScanBudget > 1 {
		c.LockScanBudget = DefaultLockScanBudget
	}
	if c.Conn.Mode == "" {
		c.Conn.Mode = ModeAuto
	}
	if c.Notify == "" {
		c.Notify = NotifyAuto
	}
	if c.KeyGroups == nil {
		groups, err := keygroup.New(keygroup.Options{})
		if err != nil {
			return c, fmt.Errorf("exporter: key groups: %w", err)
		}
		c.KeyGroups = groups
	}
	if c.LockGroups == nil {
		c.LockGroups = c.KeyGroups.Apart()
	}
	c.Clock = cmp.Or[clockwork.Clock](c.Clock, clockwork.NewRealClock())
	c.Pacer = cmp.Or[clockwork.Clock](c.Pacer, clockwork.NewRealClock())
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c, nil
}

func setDefault[T int | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Defaults of the configuration.
const (
	DefaultInterval = 15 * time.Second
	// DefaultMaxKeys and DefaultMaxDuration bound one sample's share of the
	// whole-keyspace pass; with DefaultKeysPerSecond the pacing is what
	// limits it (13 s × 1,000 keys/s).
	DefaultMaxKeys     = 200_000
	DefaultMaxDuration = 13 * time.Second
	// DefaultScanCount and DefaultBatch: 100 keys per call cost a quarter
	// of the round trips of 25; other clients' GET p99 and the server's
	// time at both in docs/benchmarks.md.
	DefaultScanCount = 100
	DefaultBatch     = 100
	// DefaultKeysPerSecond paces the whole-keyspace pass per node: a
	// 1,000,000-key node is covered in about 17 minutes. The pace is what
	// the pass costs other clients' latency, whatever the keyspace's size:
	// in one run their GET p99 beside a pass at 1,000 keys/s was 1.07×
	// that of windows without the exporter, at 2,500 1.39× and at 10,000
	// 2.01× (docs/benchmarks.md).
	DefaultKeysPerSecond = 1000
	DefaultLongHeld      = time.Minute
	// DefaultLockScanCount is the COUNT of the lock pass's SCAN … MATCH:
	// small, so that each call holds the server for a short time (COUNT
	// 100 raised other clients' GET p99 more than 25; docs/benchmarks.md).
	DefaultLockScanCount = 25
	// DefaultLockPattern is the lock pattern when none is given.
	DefaultLockPattern = "lock:*"
	// DefaultLockScanBudget is the share of the server's time the lock
	// pass's SCAN may take (docs/exporter.md: the limit it sets).
	DefaultLockScanBudget = 0.2
	// DefaultLockReconcile is how long a reconciling lock pass may take
	// once keyspace notifications keep the lock index exact. The pass only
	// repairs events lost meanwhile (counted as repairs), so it may be
	// slow: at 10,000,000 keys and 1 hour it still made most of the steady
	// state's SCAN calls, and other clients' GET p99 beside the exporter
	// was 1.35× that of windows without it, at 4 hours 1.18×
	// (docs/benchmarks.md). floorLockScanRate keeps it moving below
	// 14,400,000 keys.
	DefaultLockReconcile = 4 * time.Hour
	// DefaultMaxLocks bounds the lock keys indexed per node (about 120
	// bytes each, and each distinct holder once).
	DefaultMaxLocks = 1_000_000
	// DefaultLockHolders is how many of each lock group's longest-held
	// locks have their holder exported.
	DefaultLockHolders = 5
	// DefaultMaxQueueReply is the largest reply of a queue read (a
	// stream's first entry, its group list, a sorted set's first member)
	// sent again next sample; a larger one is suspended with a backoff.
	DefaultMaxQueueReply = 64 << 10
	// DefaultMaxInfoReply bounds an INFO reply (a server with hundreds of
	// commands and their latency percentiles answers under 100 KB).
	DefaultMaxInfoReply = 1 << 20
	// DefaultMaxReply bounds any other reply: SCAN pages, TTLs, CONFIG
	// GET, CLUSTER NODES, LATENCY HISTOGRAM, keyspace events.
	DefaultMaxReply = 1 << 20
	// DefaultDialTimeout and DefaultReadTimeout bound each connection
	// attempt and reply.
	DefaultDialTimeout = 2 * time.Second
	DefaultReadTimeout = 3 * time.Second
)

// MaxTokenBytes is the most of a lock value the sampler reads (GETRANGE 0
// MaxTokenBytes-1): owner tokens are short, and a huge value must not
// become a huge read. Tokens that share their first MaxTokenBytes bytes
// look the same to long-held tracking.
const MaxTokenBytes = 256

// memoryUsageSamples is the SAMPLES of MEMORY USAGE: the nested values of
// an aggregate it reads to estimate its size (Redis's default).
const memoryUsageSamples = 5

// Notify says whether the lock index follows Redis keyspace notifications.
type Notify string

// Notification modes.
const (
	// NotifyAuto follows lock keys through keyspace notifications: when the
	// server does not publish NotifyFlags (notify-keyspace-events, read
	// with CONFIG GET every sample), the sampler adds the missing classes
	// with CONFIG SET, keeping the operator's, and puts the operator's
	// value back on Close unless it was changed since. A CONFIG GET or SET
	// the server refuses (ACL, a renamed CONFIG, a managed service) is
	// logged once and reported by snapshot.Node.LockNotificationsRefused;
	// the lock figures then come from SCAN passes.
	NotifyAuto Notify = "auto"
	// NotifyExisting follows keyspace notifications only when the server
	// already publishes NotifyFlags: the sampler never writes its
	// configuration.
	NotifyExisting Notify = "existing"
	// NotifyEnable adds the missing NotifyFlags as NotifyAuto does, but
	// leaves them on at Close (for a setting several exporters share), and
	// a refusal is an error of StageNotifications.
	NotifyEnable Notify = "enable"
	// NotifyOff never subscribes: lock figures come from SCAN passes.
	NotifyOff Notify = "off"
)

// NotifyModes lists every mode, the default first.
var NotifyModes = []Notify{NotifyAuto, NotifyExisting, NotifyEnable, NotifyOff}

// ParseNotify parses a notification mode; "" is NotifyAuto.
func ParseNotify(s string) (Notify, error) {
	if s == "" {
		return NotifyAuto, nil
	}
	for _, m := range NotifyModes {
		if s == string(m) {
			return m, nil
		}
	}
	return NotifyAuto, fmt.Errorf("notification mode %q: want auto, existing, enable or off", s)
}

// ParseMode parses a target mode; "" is ModeAuto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeStandalone, ModeCluster:
		return m, nil
	}
	return ModeAuto, fmt.Errorf("mode %q: want auto, standalone or cluster", s)
}

// NotifyFlags are the notify-keyspace-events classes the lock index needs:
// keyspace channels (K) for generic commands (g: DEL, EXPIRE, RENAME…),
// string commands ($: SET), expiries (x) and evictions (e).
const NotifyFlags = "Kg$xe"
