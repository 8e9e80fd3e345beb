package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/exporter/doctor"
)

// Exit statuses of doctor beyond 0 (everything sampled, no critical
// finding) and 2 (usage).
const (
	exitCritical   = 1 // at least one critical finding: fail the deploy gate
	exitIncomplete = 3 // something could not be sampled (node down, command refused, keyspace not covered)
)

func init() {
	register(command{name: "doctor", help: "Analyse a live Redis once and print findings with evidence and fixes.", define: defineDoctor})
}

type doctorFlags struct {
	redis  redisFlags
	format string
	opts   doctor.Options
	th     doctor.Thresholds
}

func defineDoctor(cmd *kingpin.CmdClause) action {
	f := &doctorFlags{th: doctor.DefaultThresholds}
	// The report is read by the operator (it names hot keys), not stored
	// as labels: names are kept from the first key.
	f.redis.minKeysDefault = 1
	f.redis.keysPerSecondDefault = doctor.DefaultKeysPerSecond
	f.redis.register(cmd)
	o, th := &f.opts, &f.th
	cmd.Flag("format", "Output format: text or json.").Default("text").EnumVar(&f.format, "text", "json")
	cmd.Flag("interval", "Time between the two samples (long-held locks).").Default("2s").DurationVar(&o.Interval)
	cmd.Flag("long-held", "Token unchanged this long makes a lock long-held (default: --interval).").DurationVar(&o.LongHeld)
	cmd.Flag("max-duration", "Time the whole run may take: both samples and the interval between them.").Default("1m").DurationVar(&o.MaxDuration)
	cmd.Flag("hot-keys", "Hottest keys to list under an LFU policy.").Default("10").IntVar(&o.HotKeys)
	cmd.Flag("sync-score", "Expiry synchronisation score that is a finding.").
		Default(strconv.FormatFloat(th.SyncScore, 'f', -1, 64)).Float64Var(&th.SyncScore)
	cmd.Flag("sync-min-keys", "Keys in the busiest second needed for a synchronised-expiry finding.").
		Default(strconv.FormatUint(th.SyncMinKeys, 10)).Uint64Var(&th.SyncMinKeys)
	cmd.Flag("slow-script", "Time per script call that is slow.").Default(th.SlowScript.String()).DurationVar(&th.SlowScript)
	cmd.Flag("queue-pending", "Pending or undelivered stream entries that are a backlog.").
		Default(strconv.FormatUint(th.QueuePending, 10)).Uint64Var(&th.QueuePending)
	cmd.Flag("queue-age", "Age of the oldest pending or overdue entry that is a backlog.").
		Default(th.QueueAge.String()).DurationVar(&th.QueueAge)
	cmd.Flag("queue-length", "List length that is a backlog.").
		Default(strconv.FormatUint(th.QueueLength, 10)).Uint64Var(&th.QueueLength)
	cmd.Flag("miss-ratio", "Keyspace miss ratio that is a finding (0-1].").
		Default(strconv.FormatFloat(th.MissRatio, 'f', -1, 64)).Float64Var(&th.MissRatio)
	return f.run
}

// validate rejects out-of-range values with the flag's name.
func (f *doctorFlags) validate() error {
	o, th := f.opts, f.th
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"interval", o.Interval}, {"max-duration", o.MaxDuration}, {"slow-script", th.SlowScript}, {"queue-age", th.QueueAge}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s must be positive, got %s", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    uint64
	}{{"sync-min-keys", th.SyncMinKeys}, {"queue-pending", th.QueuePending}, {"queue-length", th.QueueLength}} {
		if n.v == 0 {
			return fmt.Errorf("--%s must be at least 1", n.name)
		}
	}
	switch {
	case o.LongHeld < 0:
		return fmt.Errorf("--long-held must not be negative, got %s", o.LongHeld)
	case o.HotKeys < 1 || o.HotKeys > 1000:
		return fmt.Errorf("--hot-keys must be in 1-1000, got %d", o.HotKeys)
	case !(th.SyncScore > 1):
		return fmt.Errorf("--sync-score must be above 1 (an even spread scores 1), got %g", th.SyncScore)
	case !(th.MissRatio > 0 && th.MissRatio <= 1):
		return fmt.Errorf("--miss-ratio must be in (0, 1], got %g", th.MissRatio)
	}
	return nil
}

func (f *doctorFlags) run(ctx context.Context, c *cli) int {
	f.redis.setLogger(c.logger)
	opts, err := f.redis.options()
	if err == nil {
		err = f.validate()
	}
	if err != nil {
		return c.usageError(err)
	}
	opts.Logger = c.logger
	o := f.opts
	o.Exporter, o.Thresholds = opts, f.th
	report, err := doctor.Run(ctx, o)
	if report == nil {
		fmt.Fprintf(c.stderr, "cachewatch doctor: %s\n", redactErr(err))
		return exitIncomplete
	}
	if werr := f.write(c, report); werr != nil {
		fmt.Fprintf(c.stderr, "cachewatch doctor: %s\n", redactErr(werr))
		return exitIncomplete
	}
	switch {
	case err != nil:
		fmt.Fprintf(c.stderr, "cachewatch doctor: %s\n", redactErr(err))
		return exitIncomplete
	case !report.Complete():
		fmt.Fprintf(c.stderr, "cachewatch doctor: incomplete: %d thing(s) could not be sampled (listed in the report)\n", len(report.Incomplete))
		return exitIncomplete
	case report.Critical():
		return exitCritical
	}
	return 0
}

func (f *doctorFlags) write(c *cli, r *doctor.Report) error {
	if f.format == "json" {
		return r.WriteJSON(c.stdout)
	}
	return r.WriteText(c.stdout)
}
