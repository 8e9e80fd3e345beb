package hooks

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
)

// semconvBuckets is the explicit bucket advice the database semantic
// conventions give db.client.operation.duration.
var semconvBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// semconvMetrics emits the OpenTelemetry database semantic conventions'
// db.client.operation.duration (stable attributes: db.system.name,
// db.operation.name, db.namespace, server.address, server.port, and on
// failure error.type and db.response.status_code), so that the hook's
// commands mix with the service's other database instrumentation.
type semconvMetrics struct {
	dur  metric.Float64Histogram
	base []attribute.KeyValue
	pool string // db.client.connection.pool.name
}

func newSemconv(m metric.Meter, opts Options) (*semconvMetrics, error) {
	dur, err := dbconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(semconvBuckets...))
	if err != nil {
		return nil, err
	}
	s := &semconvMetrics{dur: dur.Inst(), pool: opts.Name,
		base: []attribute.KeyValue{semconv.DBSystemNameRedis, semconv.DBNamespace(strconv.Itoa(opts.DB))}}
	if host, port, err := net.SplitHostPort(opts.ServerAddress); err == nil {
		s.base = append(s.base, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			s.base = append(s.base, semconv.ServerPort(p))
		}
		s.pool = opts.ServerAddress + "/" + strconv.Itoa(opts.DB)
	}
	if s.pool == "" {
		s.pool = "default"
	}
	return s, nil
}

// operation returns the precomputed record options of a successful
// operation named name (a bounded command name, or PIPELINE, MULTI).
func (s *semconvMetrics) operation(name string) []metric.RecordOption {
	if name == otherCommand {
		name = "_OTHER" // the conventions' value for a name outside a known set
	}
	kvs := append(append([]attribute.KeyValue(nil), s.base...), semconv.DBOperationName(strings.ToUpper(name)))
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// record records one operation; ok are its success options. A failed
// operation's attributes are built here (failures are rare): error.type is
// the Redis error code when the reply has one (WRONGTYPE, NOSCRIPT), the
// error class otherwise; db.response.status_code is that code.
func (s *semconvMetrics) record(ctx context.Context, ok []metric.RecordOption, opName string, d float64, failed bool, class errClass, err error) {
	if !failed {
		s.dur.Record(ctx, d, ok...)
		return
	}
	if opName == otherCommand {
		opName = "_OTHER"
	}
	kvs := append(append([]attribute.KeyValue(nil), s.base...), semconv.DBOperationName(strings.ToUpper(opName)))
	code := redisErrorCode(err)
	if code != "" {
		kvs = append(kvs, semconv.DBResponseStatusCode(code), semconv.ErrorTypeKey.String(code))
	} else {
		kvs = append(kvs, semconv.ErrorTypeKey.String(class.String()))
	}
	s.dur.Record(ctx, d, metric.WithAttributeSet(attribute.NewSet(kvs...)))
}

// redisErrorCode is the leading upper-case word of a Redis error reply
// ("WRONGTYPE Operation against ..."), or "" when err is not one: a bounded
// value, never text that could hold a key.
func redisErrorCode(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	end := strings.IndexByte(msg, ' ')
	if end < 2 || end > 16 {
		return ""
	}
	for i := 0; i < end; i++ {
		if c := msg[i]; c < 'A' || c > 'Z' {
			return ""
		}
	}
	return msg[:end]
}

// observePool observes the pool as the conventions' db.client.connection.count
// (by state, idle and used) and db.client.connection.timeouts.
func (s *semconvMetrics) observePool(m metric.Meter, src PoolStatser) error {
	count, err := dbconv.NewClientConnectionCountObservable(m)
	if err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	timeouts, err := dbconv.NewClientConnectionTimeoutsObservable(m)
	if err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	pool := append(append([]attribute.KeyValue(nil), s.base...), semconv.DBClientConnectionPoolName(s.pool))
	idle := metric.WithAttributeSet(attribute.NewSet(append(pool[:len(pool):len(pool)], semconv.DBClientConnectionStateIdle)...))
	used := metric.WithAttributeSet(attribute.NewSet(append(pool[:len(pool):len(pool)], semconv.DBClientConnectionStateUsed)...))
	all := metric.WithAttributeSet(attribute.NewSet(pool...))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f, ok := readPool(src)
		if !ok {
			return nil
		}
		o.ObserveInt64(count.Inst(), int64(f.idle), idle)
		o.ObserveInt64(count.Inst(), int64(f.inUse), used)
		o.ObserveInt64(timeouts.Inst(), int64(f.timeouts), all)
		return nil
	}, count.Inst(), timeouts.Inst())
	if err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	return nil
}
