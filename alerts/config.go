package alerts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/signals"
)

// DefaultRunbookBaseURL is where runbook_url annotations point unless the
// Config says otherwise: the runbooks page in the project's repository.
const DefaultRunbookBaseURL = "https://github.com/cachewatch/cachewatch/blob/main/docs/runbooks.md"

// ErrConfig is wrapped by every error about a bad Config value or key, so
// callers (the command line) can tell a user mistake from an I/O failure.
var ErrConfig = errors.New("alerts: bad config")

// Config holds every selector, threshold and `for:` duration of the rules:
// the monitoring-mixin `_config` idea. DefaultConfig gives the default
// values; a YAML file (LoadConfig) and Set override them. The yaml
// key of each field is also its command-line name (underscores become dashes).
type Config struct {
	// ServiceSelector selects the services that run the instrumented
	// client or the hook: comma-separated PromQL label matchers.
	ServiceSelector string `yaml:"service_selector"`
	// ExporterSelector selects the `cachewatch exporter` scrape jobs.
	ExporterSelector string `yaml:"exporter_selector"`
	// RunbookBaseURL is the runbooks page; each alert links to its section.
	RunbookBaseURL string `yaml:"runbook_base_url"`
	// GrafanaDatasourceUID and GrafanaFolder place the Grafana-managed
	// rules: the Prometheus data source they query and the folder title.
	GrafanaDatasourceUID string `yaml:"grafana_datasource_uid"`
	GrafanaFolder        string `yaml:"grafana_folder"`
	// PageWebhookURL and TicketWebhookURL are the webhooks of the page and
	// ticket receivers, in alertmanager.yaml and Grafana's contact points:
	// your pager's and ticketing integrations. The defaults are
	// placeholders in the .invalid domain, which never resolves.
	PageWebhookURL   string `yaml:"page_webhook_url"`
	TicketWebhookURL string `yaml:"ticket_webhook_url"`

	// RateWindow is the window of every rate in the cause alerts; the
	// recording rules' names say it (ratio_rate5m). Keep it at least four
	// scrape intervals long. The SLOs' windows are fixed (5m to 3d).
	RateWindow model.Duration `yaml:"rate_window"`
	// BlindLookback bounds how far back an alert whose data went missing
	// (an exporter down or not sampling, a service not scraped) looks for
	// the last value its description shows; the alert itself keeps firing
	// until its source is seen again, however long that takes, or until its
	// job leaves service discovery (no `up` series: gone, not blind).
	BlindLookback model.Duration `yaml:"blind_lookback"`

	// Objectives of the service-level objectives, over 30 days: the share
	// of cache lookups answered without an error, of Redis commands that
	// got a reply, and of waiting lock acquisitions completed within
	// LockWaitThreshold (which must be a bucket bound of
	// cachewatch_lock_acquire_duration_seconds).
	CacheAvailabilityObjective float64        `yaml:"cache_availability_objective"`
	RedisAvailabilityObjective float64        `yaml:"redis_availability_objective"`
	LockWaitObjective          float64        `yaml:"lock_wait_objective"`
	LockWaitThreshold          model.Duration `yaml:"lock_wait_threshold"`
	// The `for:` of each burn-rate tier: pages when 2 % of the 30-day
	// error budget burns in 1h (and the last 5m agree) or 5 % in 6h (and
	// 30m); tickets when 10 % burns in 1d (and 2h) or in 3d (and 6h).
	BurnPage1hFor   model.Duration `yaml:"burn_page_1h_for"`
	BurnPage6hFor   model.Duration `yaml:"burn_page_6h_for"`
	BurnTicket1dFor model.Duration `yaml:"burn_ticket_1d_for"`
	BurnTicket3dFor model.Duration `yaml:"burn_ticket_3d_for"`

	// Traffic floors: ratios over less traffic than this (per second)
	// are noise and never alert; an SLO pages only over more traffic than
	// this in its long window, so a handful of errors at night never pages.
	MinLockAttemptsPerSecond float64 `yaml:"min_lock_attempts_per_second"`
	MinLookupsPerSecond      float64 `yaml:"min_lookups_per_second"`
	MinCommandsPerSecond     float64 `yaml:"min_commands_per_second"`

	// RedisUnreachableWindow is how long every command a client sent (or
	// every sample the exporter took of a node) must have failed for want of
	// a reply before Redis counts as unreachable; RedisUnreachableFor is the
	// alert's `for:`. The window needs at least two scrapes.
	RedisUnreachableWindow model.Duration `yaml:"redis_unreachable_window"`
	RedisUnreachableFor    model.Duration `yaml:"redis_unreachable_for"`

	LockAcquireP99Warning model.Duration `yaml:"lock_acquire_p99_warning"`
	LockAcquireFor        model.Duration `yaml:"lock_acquire_for"`

	LockContentionWarning float64        `yaml:"lock_contention_warning"`
	LockContentionFor     model.Duration `yaml:"lock_contention_for"`

	// EventWindow is the window of the alerts on rare events (lost locks,
	// failed renewals, write skew, duplicate version writes): one event keeps
	// the alert up this long, so it does not flap. LocksLost and
	// RenewalsFailed are how many in the window open a ticket: one alone is
	// an event to look into, not a pattern.
	EventWindow    model.Duration `yaml:"event_window"`
	LocksLost      float64        `yaml:"locks_lost"`
	LocksLostFor   model.Duration `yaml:"locks_lost_for"`
	RenewalsFailed float64        `yaml:"renewals_failed"`
	RenewalsFor    model.Duration `yaml:"renewals_for"`
	WriteSkewFor   model.Duration `yaml:"write_skew_for"`
	DuplicatesFor  model.Duration `yaml:"duplicates_for"`

	StaleRatioWarning float64        `yaml:"stale_ratio_warning"`
	StaleRatioFor     model.Duration `yaml:"stale_ratio_for"`

	ConsecutiveLoaderFailures    float64        `yaml:"consecutive_loader_failures"`
	ConsecutiveLoaderFailuresFor model.Duration `yaml:"consecutive_loader_failures_for"`
	// StaleForeverLookback is how far back a stale-forever episode still
	// explains the errors callers get now (past the hard TTL): the ticket
	// stays open through them instead of resolving into the worse state.
	StaleForeverLookback model.Duration `yaml:"stale_forever_lookback"`

	LoaderAmplification    float64        `yaml:"loader_amplification"`
	LoaderAmplificationFor model.Duration `yaml:"loader_amplification_for"`

	// MissBurstsPerMinute is the rate of miss bursts, averaged over the
	// rate window, above which a stampede opens a ticket.
	MissBurstsPerMinute float64        `yaml:"miss_bursts_per_minute"`
	MissBurstFor        model.Duration `yaml:"miss_burst_for"`

	// ServerScriptMean is the server-side time per script call (INFO
	// commandstats, from the exporter) above which scripts block Redis;
	// ScriptP99 is the client-side p99 of a named script (the hook), which
	// includes the network and the client's own scheduling.
	ServerScriptMean model.Duration `yaml:"server_script_mean"`
	ScriptP99        model.Duration `yaml:"script_p99"`
	ScriptP99For     model.Duration `yaml:"script_p99_for"`

	CommandErrorsWarning float64        `yaml:"command_errors_warning"`
	CommandErrorsFor     model.Duration `yaml:"command_errors_for"`

	// PoolTimeoutsPerMinute is the rate of pool wait timeouts, averaged
	// over the rate window, above which a starved pool opens a ticket.
	PoolTimeoutsPerMinute float64        `yaml:"pool_timeouts_per_minute"`
	PoolTimeoutsFor       model.Duration `yaml:"pool_timeouts_for"`

	BreakerOpenFor model.Duration `yaml:"breaker_open_for"`

	LocksWithoutTTLFor model.Duration `yaml:"locks_without_ttl_for"`
	LocksLongHeldFor   model.Duration `yaml:"locks_long_held_for"`

	ExpirySync        float64        `yaml:"expiry_sync"`
	ExpirySyncMinKeys float64        `yaml:"expiry_sync_min_keys"`
	ExpirySyncFor     model.Duration `yaml:"expiry_sync_for"`

	HitRatioDrop    float64        `yaml:"hit_ratio_drop"`
	HitRatioDropFor model.Duration `yaml:"hit_ratio_drop_for"`

	QueueOldestAge    model.Duration `yaml:"queue_oldest_age"`
	QueueOldestAgeFor model.Duration `yaml:"queue_oldest_age_for"`
	StreamLag         float64        `yaml:"stream_lag"`
	StreamPendingAge  model.Duration `yaml:"stream_pending_age"`
	StreamFor         model.Duration `yaml:"stream_for"`

	ExporterDownFor     model.Duration `yaml:"exporter_down_for"`
	ExporterFailingFor  model.Duration `yaml:"exporter_failing_for"`
	ExporterErrorsFor   model.Duration `yaml:"exporter_errors_for"`
	KeyspaceCoverage    float64        `yaml:"keyspace_coverage"`
	KeyspaceCoverageFor model.Duration `yaml:"keyspace_coverage_for"`
	KeyGroupOverflowFor model.Duration `yaml:"keygroup_overflow_for"`

	// LockStateStaleIntervals is how many sample intervals old the
	// exporter's lock figures may get before CachewatchLockStateStale.
	LockStateStaleIntervals float64        `yaml:"lock_state_stale_intervals"`
	LockStateStaleFor       model.Duration `yaml:"lock_state_stale_for"`
}

func minutes(n int) model.Duration { return model.Duration(n) * model.Duration(60e9) }

func millis(n int) model.Duration { return model.Duration(n) * model.Duration(1e6) }

// DefaultConfig returns the defaults: objectives of 99.9 % for cache and
// Redis availability and 99 % of waiting lock acquisitions within 500ms,
// the burn-rate tiers' `for:` durations, cause thresholds (lock acquire
// p99 above 50 ms, first-try contention above 5 %, …) and `for:` durations
// long enough that a single scrape or a short spike opens nothing.
func DefaultConfig() Config {
	return Config{
		ServiceSelector:  `job=~".+"`,
		ExporterSelector: `job="cachewatch-exporter"`,
		RunbookBaseURL:   DefaultRunbookBaseURL,

		GrafanaDatasourceUID: "prometheus",
		GrafanaFolder:        "cachewatch",
		PageWebhookURL:       "https://pager.example.invalid/cachewatch",
		TicketWebhookURL:     "https://tickets.example.invalid/cachewatch",

		RateWindow:    minutes(5),
		BlindLookback: minutes(24 * 60),

		CacheAvailabilityObjective: 0.999,
		RedisAvailabilityObjective: 0.999,
		LockWaitObjective:          0.99,
		LockWaitThreshold:          millis(500),
		BurnPage1hFor:              minutes(2),
		BurnPage6hFor:              minutes(15),
		BurnTicket1dFor:            minutes(60),
		BurnTicket3dFor:            minutes(180),

		MinLockAttemptsPerSecond: 0.05,
		MinLookupsPerSecond:      0.05,
		MinCommandsPerSecond:     0.1,

		RedisUnreachableWindow: minutes(1),
		RedisUnreachableFor:    millis(30000),

		LockAcquireP99Warning: millis(50),
		LockAcquireFor:        minutes(10),

		LockContentionWarning: 0.05,
		LockContentionFor:     minutes(10),

		EventWindow:    minutes(15),
		LocksLost:      3,
		LocksLostFor:   minutes(1),
		RenewalsFailed: 3,
		RenewalsFor:    minutes(5),
		WriteSkewFor:   minutes(1),
		DuplicatesFor:  minutes(1),

		StaleRatioWarning: 0.5,
		StaleRatioFor:     minutes(15),

		ConsecutiveLoaderFailures:    5,
		ConsecutiveLoaderFailuresFor: minutes(10),
		StaleForeverLookback:         minutes(24 * 60),

		LoaderAmplification:    1,
		LoaderAmplificationFor: minutes(15),

		MissBurstsPerMinute: 1,
		MissBurstFor:        minutes(5),

		ServerScriptMean: millis(5),
		ScriptP99:        millis(10),
		ScriptP99For:     minutes(10),

		CommandErrorsWarning: 0.01,
		CommandErrorsFor:     minutes(10),

		PoolTimeoutsPerMinute: 1,
		PoolTimeoutsFor:       minutes(5),
		BreakerOpenFor:        minutes(2),

		LocksWithoutTTLFor: minutes(5),
		LocksLongHeldFor:   minutes(10),

		ExpirySync:        10,
		ExpirySyncMinKeys: 100,
		ExpirySyncFor:     minutes(15),

		HitRatioDrop:    0.2,
		HitRatioDropFor: minutes(10),

		QueueOldestAge:    minutes(5),
		QueueOldestAgeFor: minutes(10),
		StreamLag:         1000,
		StreamPendingAge:  minutes(5),
		StreamFor:         minutes(10),

		ExporterDownFor:    minutes(5),
		ExporterFailingFor: minutes(5),
		ExporterErrorsFor:  minutes(15),
		KeyspaceCoverage:   1,
		// The exporter's first whole-keyspace pass at its default pace
		// (1,000 keys/s) covers 14,400,000 keys in 4 h.
		KeyspaceCoverageFor: minutes(4 * 60),
		KeyGroupOverflowFor: minutes(15),

		LockStateStaleIntervals: 3,
		LockStateStaleFor:       minutes(2),
	}
}

// LoadConfig reads a YAML file of overrides on top of DefaultConfig. Keys
// not set keep their defaults; an unknown key is an error naming it.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("alerts: read config: %w", err)
	}
	cfg, err := ParseConfig(bytes.NewReader(data))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig on an open reader.
func ParseConfig(r io.Reader) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: %s", ErrConfig, unknownKeyMessage(err))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// yaml.v3 reports an unknown key as `field x not found in type alerts.Config`;
// users know keys, not Go types.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

func unknownKeyMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	return unknownField.ReplaceAllString(msg, "unknown key $1")
}

// field is one settable Config field.
type field struct {
	key string
	v   reflect.Value
}

func (c *Config) fields() []field {
	rv := reflect.ValueOf(c).Elem()
	rt := rv.Type()
	out := make([]field, 0, rt.NumField())
	for i := range rt.NumField() {
		out = append(out, field{key: rt.Field(i).Tag.Get("yaml"), v: rv.Field(i)})
	}
	return out
}

// field returns the value of key, which must be one.
func (c *Config) field(key string) reflect.Value {
	for _, f := range c.fields() {
		if f.key == key {
			return f.v
		}
	}
	panic("alerts: no config key " + key)
}

// Keys returns every config key (the yaml names) in a stable order, for
// command lines that offer one flag per key.
func (c *Config) Keys() []string {
	var keys []string
	for _, f := range c.fields() {
		keys = append(keys, f.key)
	}
	sort.Strings(keys)
	return keys
}

// Get returns the current value of key as text, as Set accepts it.
func (c *Config) Get(key string) (string, error) {
	for _, f := range c.fields() {
		if f.key == key {
			return formatValue(f.v), nil
		}
	}
	return "", fmt.Errorf("%w: unknown key %q", ErrConfig, key)
}

func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case model.Duration:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return v.String()
	}
}

// Set overrides one key with a value in the YAML file's syntax: a number, a
// Prometheus duration ("90s", "5m") or a string. It does not validate the
// whole Config; call Validate after the last Set.
func (c *Config) Set(key, value string) error {
	for _, f := range c.fields() {
		if f.key != key {
			continue
		}
		switch f.v.Interface().(type) {
		case model.Duration:
			d, err := model.ParseDuration(value)
			if err != nil {
				return fmt.Errorf("%w: %s: %q is not a duration like 90s or 5m", ErrConfig, key, value)
			}
			f.v.Set(reflect.ValueOf(d))
		case float64:
			x, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return fmt.Errorf("%w: %s: %q is not a number", ErrConfig, key, value)
			}
			f.v.SetFloat(x)
		default:
			f.v.SetString(value)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown key %q", ErrConfig, key)
}

// matchers is a non-empty, comma-separated list of PromQL label matchers.
var matchers = regexp.MustCompile(`^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*(,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*)*$`)

// Validate reports the first bad value, naming its key: selectors must be
// label matchers, ratios within [0, 1] (objectives below 1), other numbers
// and durations positive, and the lock-wait threshold a bucket bound of the
// acquire-time histogram.
func (c *Config) Validate() error {
	for _, f := range c.fields() {
		if err := validateField(f); err != nil {
			return fmt.Errorf("%w: %s: %s", ErrConfig, f.key, err)
		}
	}
	for key, o := range map[string]float64{"cache_availability_objective": c.CacheAvailabilityObjective,
		"redis_availability_objective": c.RedisAvailabilityObjective, "lock_wait_objective": c.LockWaitObjective} {
		if o >= 1 || o <= 0 {
			return fmt.Errorf("%w: %s: an objective is above 0 and below 1 (0.999 is 99.9 %%), got %v", ErrConfig, key, o)
		}
	}
	le := time.Duration(c.LockWaitThreshold).Seconds()
	if buckets := signals.LockAcquireDuration.Metric().Buckets; !slices.Contains(buckets, le) {
		return fmt.Errorf("%w: lock_wait_threshold: %v is no bucket bound of %s (%v seconds)", ErrConfig,
			c.LockWaitThreshold, signals.LockAcquireDuration, buckets)
	}
	return nil
}

func validateField(f field) error {
	switch x := f.v.Interface().(type) {
	case model.Duration:
		if x <= 0 {
			return errors.New("must be a positive duration")
		}
	case float64:
		if x < 0 || x != x {
			return fmt.Errorf("must not be negative, got %v", x)
		}
		if isRatio(f.key) && x > 1 {
			return fmt.Errorf("is a ratio from 0 to 1, got %v", x)
		}
	case string:
		if strings.HasSuffix(f.key, "_selector") && !matchers.MatchString(x) {
			return fmt.Errorf("%q is not a list of label matchers like job=~\"api|worker\"", x)
		}
		if x == "" {
			return errors.New("must not be empty")
		}
		if strings.HasSuffix(f.key, "_webhook_url") {
			if u, err := url.Parse(x); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%q is not an http(s) URL", x)
			}
		}
	}
	return nil
}

func isRatio(key string) bool {
	switch key {
	case "lock_contention_warning", "stale_ratio_warning", "command_errors_warning", "hit_ratio_drop", "keyspace_coverage",
		"cache_availability_objective", "redis_availability_objective", "lock_wait_objective":
		return true
	}
	return false
}
