package demo

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cachewatch/cachewatch/internal/seriessum"
	"github.com/cachewatch/cachewatch/signals"
)

// snapshot is one gathering of the registry: per metric family, the sum of
// the matching series' counter values (histograms: their sample counts).
type snapshot map[string][]*dto.Metric

func gather(g prometheus.Gatherer) (snapshot, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	s := snapshot{}
	for _, f := range fams {
		s[f.GetName()] = f.GetMetric()
	}
	return s, nil
}

// sum adds up the series of metric m whose labels equal every pair in
// match (name, value, name, value…). Counters give their value, histograms
// their count, gauges their value.
func (s snapshot) sum(m signals.ID, match ...string) float64 {
	return seriessum.Sum(s[m.String()], match...)
}

// phaseSignals are the catalog figures the report compares, read from one
// snapshot; a phase's figures are the difference of two of them.
type phaseSignals struct {
	LoaderCalls, ValueWrites, Fallbacks float64
	Misses, Stale, MissBursts           float64
	FirstAttempts, FirstBusy            float64
	TryOnceFirst, TryOnceBusy           float64 // first attempts of try-once acquisitions (the job's lock)
	LocksLost, WriteSkew                float64
	// JobLockEnded counts the lease ends of the job's lock group other
	// than released and error: the lease ended under its holder.
	// JobLockTaken counts those that found another owner at release: the
	// hook's refused (a release answered 0), the client's taken_over.
	JobLockEnded, JobLockTaken float64
}

// endedUnderHolder are the lease ends of a lease that ended before its
// holder released it.
var endedUnderHolder = []string{signals.EndExpired, signals.EndRefused, signals.EndLost, signals.EndTakenOver}

// readSignals reads the figures of s; jobGroup is the key group of the
// job's lock.
func readSignals(s snapshot, jobGroup string) phaseSignals {
	var jobEnded float64
	for _, end := range endedUnderHolder {
		jobEnded += s.sum(signals.LockLeaseEnds, signals.KeyGroupLabel, jobGroup, signals.OutcomeLabel, end)
	}
	return phaseSignals{
		// "rejected" counts loads refused a fallback slot: no call made.
		LoaderCalls: s.sum(signals.LoaderCalls, "result", "success") + s.sum(signals.LoaderCalls, "result", "error"),
		Fallbacks:   s.sum(signals.CacheLookups, "result", "fallback"),
		// The naive services write each loaded value with SETEX; the hook
		// times every command, so its SETEX count is their loader calls.
		ValueWrites:   s.sum(signals.CommandDuration, "command", "setex"),
		Misses:        s.sum(signals.CacheLookups, "result", "miss"),
		Stale:         s.sum(signals.CacheLookups, "result", "stale"),
		MissBursts:    s.sum(signals.MissBursts),
		FirstAttempts: s.sum(signals.LockAttempts, "attempt", "first"),
		FirstBusy:     s.sum(signals.LockAttempts, "attempt", "first", "result", "busy"),
		TryOnceFirst:  s.sum(signals.LockAttempts, "attempt", "first", signals.ModeLabel, signals.ModeTryOnce),
		TryOnceBusy:   s.sum(signals.LockAttempts, "attempt", "first", "result", "busy", signals.ModeLabel, signals.ModeTryOnce),
		LocksLost:     s.sum(signals.LocksLost),
		WriteSkew:     s.sum(signals.WriteSkew),
		JobLockEnded:  jobEnded,
		JobLockTaken: s.sum(signals.LockLeaseEnds, signals.KeyGroupLabel, jobGroup, signals.OutcomeLabel, signals.EndRefused) +
			s.sum(signals.LockLeaseEnds, signals.KeyGroupLabel, jobGroup, signals.OutcomeLabel, signals.EndTakenOver),
	}
}

func (a phaseSignals) minus(b phaseSignals) phaseSignals {
	return phaseSignals{
		LoaderCalls: a.LoaderCalls - b.LoaderCalls, ValueWrites: a.ValueWrites - b.ValueWrites,
		Fallbacks: a.Fallbacks - b.Fallbacks,
		Misses:    a.Misses - b.Misses, Stale: a.Stale - b.Stale, MissBursts: a.MissBursts - b.MissBursts,
		FirstAttempts: a.FirstAttempts - b.FirstAttempts, FirstBusy: a.FirstBusy - b.FirstBusy,
		TryOnceFirst: a.TryOnceFirst - b.TryOnceFirst, TryOnceBusy: a.TryOnceBusy - b.TryOnceBusy,
		LocksLost: a.LocksLost - b.LocksLost, WriteSkew: a.WriteSkew - b.WriteSkew,
		JobLockEnded: a.JobLockEnded - b.JobLockEnded, JobLockTaken: a.JobLockTaken - b.JobLockTaken,
	}
}
