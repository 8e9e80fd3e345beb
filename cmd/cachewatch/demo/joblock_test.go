package demo

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/locks"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// holderName is how the unprotected job's lock names its holder: the
// instance, as the metadata after its token.
var holderName = regexp.MustCompile(`^unprotected-[0-9]+$`)

// jobLockGroup is the key group of the job's lock, as the demo's
// classifier names it.
func jobLockGroup(t *testing.T) string {
	t.Helper()
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	return groups.Classify(jobLockKey)
}

// watchJobLock returns an Options.holdPhase that holds the unprotected
// phase until a user watching it would have seen its job's lock expire
// under its holder: the listing behind `cachewatch locks` (exporter/locks,
// reading the Redis at *url in mode) shows the lock held by the instance
// its value names, with a TTL within its lease; an exporter's lock holder
// series names such an instance; and the hook has counted a run's lease
// that expired. *url is set by Options.Announce, before any phase.
func watchJobLock(t *testing.T, reg *prometheus.Registry, url *string, mode exporter.Mode) func(string) {
	group := jobLockGroup(t)
	return func(phase string) {
		if phase != PhaseUnprotected {
			return
		}
		for _, check := range []func() error{
			func() error { return listedJobLock(*url, mode) },
			func() error { return exportedJobLockHolder(reg, group) },
			func() error { return countedJobLockExpiry(reg, group) },
		} {
			if err := check(); err != nil {
				t.Errorf("unprotected phase: %v", err)
			}
		}
	}
}

// listedJobLock waits until the listing of `cachewatch locks` shows the
// job's lock read as redislock's value, and checks what it says of it. (A
// lock that expires between the listing's PTTL and GETRANGE is read empty,
// opaque: the next listing is waited for.)
func listedJobLock(url string, mode exporter.Mode) error {
	target, err := exporter.ParseURL(url)
	if err != nil {
		return err
	}
	target.Mode = mode
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	if err != nil {
		return err
	}
	r, err := locks.New(locks.Options{Target: target, Patterns: []string{LockPattern}, Groups: groups})
	if err != nil {
		return err
	}
	ctx := context.Background()
	var lock *locks.Lock
	err = poll.Check(ctx, poll.Bound, 20*time.Millisecond, func() error {
		l, err := r.Read(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(l.Locks, func(lk locks.Lock) bool { return lk.Key == jobLockKey })
		switch {
		case i < 0:
			return fmt.Errorf("%d locks listed, not %s", len(l.Locks), jobLockKey)
		case l.Locks[i].Format != "redislock":
			return fmt.Errorf("%s listed as %+v: want the format redislock", jobLockKey, l.Locks[i])
		}
		lock = &l.Locks[i]
		return nil
	})
	if err != nil {
		return fmt.Errorf("cachewatch locks never listed the job's lock: %w", err)
	}
	if !holderName.MatchString(lock.Service) || lock.TTL < 0 || lock.TTL > jobLockTTL.Seconds() {
		return fmt.Errorf("cachewatch locks lists the job's lock as %+v: want service unprotected-N and a TTL within %v",
			*lock, jobLockTTL)
	}
	return nil
}

// exportedJobLockHolder waits until an exporter's lock holder series of
// the job's lock group names an unprotected instance as its service.
func exportedJobLockHolder(reg *prometheus.Registry, group string) error {
	err := poll.Check(context.Background(), poll.Bound, 20*time.Millisecond, func() error {
		snap, err := gather(reg)
		if err != nil {
			return err
		}
		var services []string
		for _, m := range snap[signals.LockHolderHeld.String()] {
			if l := labels(m.GetLabel()); l[signals.KeyGroupLabel] == group {
				if holderName.MatchString(l["service"]) {
					return nil
				}
				services = append(services, l["service"])
			}
		}
		return fmt.Errorf("holder series of %s name the services %q, no unprotected-N", group, services)
	})
	if err != nil {
		return fmt.Errorf("the exporter never named the job lock's holder: %w", err)
	}
	return nil
}

// countedJobLockExpiry waits until the hook has counted a run of the job
// whose lease expired under it.
func countedJobLockExpiry(reg *prometheus.Registry, group string) error {
	err := poll.Check(context.Background(), poll.Bound, 20*time.Millisecond, func() error {
		snap, err := gather(reg)
		if err != nil {
			return err
		}
		if snap.sum(signals.LockLeaseEnds, signals.KeyGroupLabel, group, signals.OutcomeLabel, signals.EndExpired) == 0 {
			return errors.New("no lease of the job's lock counted expired")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the hook never counted the job's lock expiring: %w", err)
	}
	return nil
}

// checkJobLock asserts, after a run whose unprotected phase watchJobLock
// held, that the job lock's lease ends counted expired by the unprotected
// instances' hooks are the runs whose release found the lock gone, and
// that the report shows the job's lock expiring under its holder.
func checkJobLock(t *testing.T, reg *prometheus.Registry, r *Report) {
	t.Helper()
	un := r.Phases[0]
	if *un.JobLockExpired.Truth == 0 {
		t.Fatal("unprotected: no run of the job had its lock expire under it")
	}
	snap, err := gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	group := jobLockGroup(t)
	var expired float64
	for _, m := range snap[signals.LockLeaseEnds.String()] {
		l := labels(m.GetLabel())
		if strings.HasPrefix(l[signals.ClientLabel], "unprotected-") && l[signals.KeyGroupLabel] == group &&
			l[signals.OutcomeLabel] == signals.EndExpired {
			expired += m.GetCounter().GetValue()
		}
	}
	gone := *un.JobLockExpired.Truth - *un.JobLockTaken.Truth
	if expired != gone {
		t.Errorf("unprotected: %s{outcome=%q, key_group=%q} = %v, want the %v job runs whose release found the lock gone",
			signals.LockLeaseEnds, signals.EndExpired, group, expired, gone)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "job lock expired under its holder") {
		t.Errorf("the text report has no row for the job lock expiring:\n%s", text.String())
	}
}
