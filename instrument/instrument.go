// Package instrument is cachewatch's instrumented lease-lock and
// stale-while-revalidate cache client over go-redis v9.
//
// Services use it where they would hand-write SET NX PX locks and cache-aside
// code. It prevents stampedes and reports its lock and cache decisions as
// metrics of the signals catalog (per key group), OpenTelemetry span events
// and, at debug level, slog lines (SlideTTL only logs).
//
// A Client takes locks (Lock), writes versioned values (SetVersioned),
// checks idempotency keys (FirstSeen), slides TTLs (SlideTTL) and
// invalidates keys (Invalidate, InvalidateMatch). A Cache, made by NewCache
// over a Client, is a stale-while-revalidate cache of one kind of value:
// Fetch (and FetchMany) with a loader, Get and Set without one, Invalidate,
// and Close. Keys are always named as the caller wrote them; the storage
// layout (hash tags, refresh claims) stays inside the package.
package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/origin"
	"github.com/cachewatch/cachewatch/keygroup"
)

// Errors callers branch on. Returned errors wrap them; test with errors.Is.
var (
	// ErrLockBusy: the lock (or refresh claim) is held by someone else and
	// the retries allowed are spent.
	ErrLockBusy = errors.New("cachewatch: lock busy")
	// ErrRedis: Redis failed (unreachable, timeout, error reply). The
	// underlying error is wrapped too.
	ErrRedis = errors.New("cachewatch: redis failed")
	// ErrNameTaken: NewCache was given (or defaulted to) the name of
	// another open Cache on the same registry, whose breaker and limiter
	// series it would share. It is the same value as hooks.ErrNameTaken.
	ErrNameTaken = emit.ErrNameTaken
)

// Options configures a Client. The zero value is usable.
type Options struct {
	// Registerer receives the client's metrics. nil means
	// prometheus.DefaultRegisterer, unless MeterProvider is set. Several
	// clients (and hooks) may share one registry: they share the collectors.
	Registerer prometheus.Registerer
	// MeterProvider, when set, receives the same metrics as OpenTelemetry
	// instruments (signals.MeterName scope; names and kinds in
	// docs/metrics.md); with Registerer nil, only there. Set both to emit
	// through both. nil means no OpenTelemetry metrics: pass
	// otel.GetMeterProvider() for the global one, which forwards to the
	// SDK that the program installs, even later.
	MeterProvider metric.MeterProvider
	// NativeHistogramBucketFactor, above 1, makes the Prometheus histograms
	// native (exponential) histograms too, beside their classic buckets,
	// for a Prometheus that scrapes them; dashboards keep reading the
	// classic buckets. 1.1 is a common choice. 0 means classic only.
	NativeHistogramBucketFactor float64
	// KeyGroups maps keys to metric label values. nil means the registry's
	// shared default classifier (keygroup.Shared).
	KeyGroups *keygroup.Classifier
	// TracerProvider for spans. nil means no spans, as a nil MeterProvider
	// means no OpenTelemetry metrics: pass otel.GetTracerProvider() for the
	// global one (no span is started while no SDK is installed behind it).
	TracerProvider trace.TracerProvider
	// Logger receives one debug line per decision; nil means slog.Default().
	Logger *slog.Logger
	// Clock is the time source of every decision, timer and ticker: TTL
	// judgement, lock leases and their expiry timers, renewal heartbeats,
	// retry backoff, waiters' polling and orphan-claim releases. nil means
	// the real clock; tests inject clockwork.NewFakeClock() to exercise
	// leases, renewals, backoff and TTLs without sleeping. (Redis expires
	// keys on its own clock; context deadlines stay on the real one, and so
	// does the liveness key's refresh and lapse, LivenessTTL, which Redis
	// expires.)
	Clock clockwork.Clock
	// Name is the client label of this client's series (default
	// "default"): of its lock and cache series, and of its Caches' circuit
	// breakers and source limiters unless a Cache has its own
	// CacheOptions.Name. Clients that share a Name on one registry add to
	// the same series; give a hooked client's hook the same Name so both
	// views of one client line up.
	Name string
	// Namespace prefixes the pub/sub channels the client's Caches use
	// (default "cachewatch"): <Namespace>:invalidate carries invalidation
	// notices to every process's copies, <Namespace>:wake:<random id> (one
	// per Client) wakes its callers waiting for another process's load.
	// Services that share a Redis but not their keys take one namespace
	// each, so that one's invalidations never drop the other's copies. With Redis ACLs, grant
	// the client's user the channels of its namespace, e.g.
	// "ACL SETUSER orders ... resetchannels &orders:*" for Namespace
	// "orders"; without them, waiters fall back to polling
	// (CacheOptions.PollInterval) and copies to revalidation.
	Namespace string
	// LivenessTTL is the life of this process instance's liveness key
	// (lockholder.AliveKey), which the client refreshes every third of it
	// while it takes live locks (LockOptions.NoLiveness false). A waiter
	// that finds such a lock held and its holder's key gone takes it over
	// at once instead of waiting for its TTL; the holder, when it could not
	// refresh the key for this long (stopped, starved, cut off from Redis),
	// ends its live locks as lost. Zero means DefaultLivenessTTL (1.5s).
	// Raise it where a process may stall longer (pool waits, long GC
	// pauses on a starved machine): a stall past it costs the holder its
	// locks, never two holders.
	LivenessTTL time.Duration
}

// DefaultNamespace is the Namespace of a zero Options.
const DefaultNamespace = "cachewatch"

// Client is the instrumented lock and cache client. It is safe for
// concurrent use.
type Client struct {
	rdb    redis.UniversalClient
	reg    prometheus.Registerer
	groups *keygroup.Classifier
	m      *metrics
	spans  tracing
	log    *slog.Logger
	clock  clockwork.Clock
	name   string
	// holder is the identity the client's locks and refresh claims carry.
	holder *lockholder.Identity
	// hub is the one pub/sub connection of the Client's Caches: wake-ups
	// and invalidation notices.
	hub *hub
	// writes are its Caches' writes of loaded values still in flight.
	writes pendingWrites
	// alive keeps this process's liveness key while it takes live locks;
	// aliveCheck is the liveness argument of the acquire script
	// (luascript.LockAcquire): the key prefix where one script may read the
	// liveness key (one server), "1" where it may not (Cluster, Ring).
	alive      *liveness
	aliveCheck string
}

// New returns a Client over rdb (a *redis.Client, *redis.ClusterClient or
// failover client).
func New(rdb redis.UniversalClient, opts Options) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("cachewatch: instrument.New: nil redis client")
	}
	sinks := emit.New(opts.Registerer, opts.MeterProvider, opts.NativeHistogramBucketFactor)
	reg := sinks.Registerer
	if opts.Name == "" {
		opts.Name = "default"
	}
	m, err := newMetrics(sinks, opts.Name)
	if err != nil {
		return nil, err
	}
	c := &Client{rdb: rdb, reg: reg, m: m, groups: opts.KeyGroups, log: opts.Logger, clock: opts.Clock, name: opts.Name,
		holder: lockholder.NewIdentity(opts.Name)}
	if c.groups == nil {
		c.groups = emit.SharedClassifier(sinks)
	}
	c.spans = newTracing(opts.TracerProvider)
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	c.hub = newHub(rdb, c.ctx, ns, c.clock)
	c.alive = newLiveness(c, opts.LivenessTTL)
	c.aliveCheck = "1"
	if _, single := rdb.(*redis.Client); single {
		c.aliveCheck = lockholder.AlivePrefix
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// now reads the client's clock.
func (c *Client) now() time.Time { return c.clock.Now() }

// group returns the key group of key.
func (c *Client) group(key string) string { return c.groups.Classify(key) }

// ctx marks ctx so that a cachewatch hook on the same go-redis client does
// not count this client's lock and cache outcomes twice.
func (c *Client) ctx(ctx context.Context) context.Context { return origin.Instrumented(ctx) }

// redisErr wraps a Redis failure so callers can test errors.Is(err, ErrRedis).
func redisErr(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrRedis, op, err)
}

// shortToken shortens an owner token (or the random part of a lock value)
// for logs: enough to correlate lines, not enough to forge a release.
func shortToken(tok string) string {
	tok = strings.TrimPrefix(tok, lockholder.Version+"|")
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}
