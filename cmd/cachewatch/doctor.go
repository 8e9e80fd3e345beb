package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cachewatch/cachewatch/exporter/doctor"
)

// Exit statuses of doctor beyond 0 (no critical finding) and 2 (usage).
const (
	exitCritical = 1 // at least one critical finding: fail the deploy gate
	exitNoRedis  = 3 // no node could be sampled
)

func init() {
	register("doctor", command{summary: "analyse a live Redis once and print findings with evidence and fixes", run: runDoctor})
}

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("doctor", stderr)
	var rf redisFlags
	rf.register(fs)
	fs.StringVar(&rf.url, "redis", "", "Redis `URL` (same as --redis.url)")
	format := fs.String("format", "text", "output format: text or json")
	var o doctor.Options
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "time between the two samples (long-held locks)")
	fs.DurationVar(&o.LongHeld, "long-held", 0, "token unchanged this long makes a lock long-held (default: --interval)")
	fs.DurationVar(&o.MaxDuration, "max-duration", time.Minute, "time allowed to cover the keyspace, per sample")
	fs.IntVar(&o.HotKeys, "hot-keys", 10, "hottest keys to list under an LFU policy")
	th := doctor.DefaultThresholds
	fs.Float64Var(&th.SyncScore, "sync-score", th.SyncScore, "expiry synchronisation score that is a finding")
	fs.Uint64Var(&th.SyncMinKeys, "sync-min-keys", th.SyncMinKeys, "keys in the busiest second needed for a synchronised-expiry finding")
	fs.DurationVar(&th.SlowScript, "slow-script", th.SlowScript, "time per script call that is slow")
	fs.Uint64Var(&th.QueuePending, "queue-pending", th.QueuePending, "pending or undelivered stream entries that are a backlog")
	fs.DurationVar(&th.QueueAge, "queue-age", th.QueueAge, "age of the oldest pending or overdue entry that is a backlog")
	fs.Uint64Var(&th.QueueLength, "queue-length", th.QueueLength, "list length that is a backlog")
	fs.Float64Var(&th.MissRatio, "miss-ratio", th.MissRatio, "keyspace miss ratio that is a finding")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	opts, err := rf.options()
	if err == nil && *format != "text" && *format != "json" {
		err = fmt.Errorf("--format %q: want text or json", *format)
	}
	if err == nil && (o.Interval <= 0 || o.MaxDuration <= 0 || o.LongHeld < 0) {
		err = errors.New("--interval and --max-duration must be positive")
	}
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch doctor: %v\n", err)
		return 2
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	o.Exporter, o.Thresholds = opts, th
	report, err := doctor.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch doctor: %v\n", err)
		return exitNoRedis
	}
	if *format == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch doctor: %v\n", err)
		return exitNoRedis
	}
	if report.Critical() {
		return exitCritical
	}
	return 0
}
