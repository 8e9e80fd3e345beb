package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/units"

	s "github.com/cachewatch/cachewatch/signals"
)

// Stable identities of the boards: links and bookmarks survive regeneration.
const (
	ContentionUID = "cachewatch-contention"
	RedisUID      = "cachewatch-redis"
	KeyspaceUID   = "cachewatch-keyspace"
)

var kg = []string{keyGroupLabel}

// contention is the service's view: what the instrumented client and the
// hook saw of locks and the cache, per key group.
func contention() (*board, error) {
	x := &exprs{client: true, keyGroup: true}
	e := contentionQueries(x)

	b := &board{
		uid:         ContentionUID,
		title:       "cachewatch / Service contention",
		description: "Locks and cache as the service sees them (instrumented client and hook), per key group: from waiting callers down to the cause.",
		anchors:     []s.ID{s.LockAttempts, s.CacheLookups},
		client:      true,
		keyGroup:    true,
		rows: []row{{
			title:  "At a glance",
			panels: contentionGlance(x, e),
		}, sloRow(), {
			title: "Symptom: callers wait for locks",
			panels: []panel{{
				title: "Lock acquire time p50 / p99",
				help: help{"Time from the first acquire attempt to the outcome, retries and backoff included, per key group, of callers that wait for the lock (mode wait; a try-once acquisition is one attempt).",
					"p99 below the alert's lines; a p99 near the give-up time means callers queue behind one holder.", rbLockAcquireSlow},
				// The lines are the p99's thresholds; the p50 shares the axis.
				unit: units.Seconds, scale: alertValue,
				targets: []target{
					{x.quantile(0.5, s.LockAcquireDuration, kg, x.is(s.LockAcquireDuration, s.ModeLabel, s.ModeWait)), "p50 {{key_group}}"},
					{e.acquireP99, "p99 {{key_group}}"},
				},
			}, {
				title: "Contention rate (busy first attempts / first attempts)",
				help: help{"Share of first acquire attempts that found the lock already held, per key group, of callers that wait for the lock (mode wait).",
					"a few percent; higher means many workers want the same lock at once.", rbLockContention},
				unit: units.PercentUnit, max: 1, scale: alertValue,
				targets: []target{{e.contention, "{{key_group}}"}},
			}, {
				title: "Busy share of try-once acquisitions",
				help: help{"Share of try-once acquisitions (callers that asked not to wait, such as a run-once job) that found the lock already held, per key group. Losing the race is their design: the loser skips the work, and no alert counts them.",
					"any share: it grows with the number of instances racing for the job.", rbLockContention},
				unit: units.PercentUnit, max: 1,
				targets: []target{{e.tryOnceBusy, "{{key_group}}"}},
			}, {
				title: "Lock attempts by result",
				help: help{"Single SET NX attempts per second by result, by first try or retry, and by mode (wait, or try once).",
					"retries a small fraction of first tries; no errors.", rbLockContention},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.LockAttempts, []string{keyGroupLabel, "result", "attempt", s.ModeLabel}), "{{key_group}} {{result}} ({{attempt}}, {{mode}})"}},
			}},
		}, {
			title: "Cause: locks held too long, or lost mid-work",
			panels: []panel{{
				title: "Lock hold time p50 / p99",
				help: help{"Time a lock was held, from acquisition to release or loss.",
					"p99 well below the lock TTL; close to the TTL means the lease can expire mid-work.", rbLocksLost},
				unit: units.Seconds,
				targets: []target{
					{x.quantile(0.5, s.LockHoldDuration, kg), "p50 {{key_group}}"},
					{x.quantile(0.99, s.LockHoldDuration, kg), "p99 {{key_group}}"},
				},
			}, {
				title: "Lost locks by reason",
				help: help{"Locks lost before their holder released them: expired, renewal failed, or owned by someone else at release.",
					"0: every lost lock let a second worker into the critical section.", rbLocksLost},
				// The ticket counts lost locks in its event window, from a
				// few up: no line on a rate per second means the same.
				unit: units.OpsPerSecond, scale: notComparable,
				targets: []target{{x.rate(s.LocksLost, []string{keyGroupLabel, "reason"}), "{{key_group}} {{reason}}"}},
			}, {
				title: "Lease ends by outcome",
				help: help{"How lock leases ended, per second: released by their holder, expired under it, lost (a renewal failed), taken_over (another owner at release), error (the release failed). The client counts each lease it took once; the hook counts what the owner-checked releases and renewals of other lock code answer on the wire, refused where a release found the lock no longer its holder's (another owner's, or gone where the reply does not tell).",
					"released only; any other outcome is a holder that worked on after its lease ended.", rbLocksLost},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.LockLeaseEnds, []string{keyGroupLabel, s.OutcomeLabel}), "{{key_group}} {{outcome}}"}},
			}, {
				title: "Lease renewals by result",
				help: help{"Heartbeats extending held locks, by result.",
					"all renewed; lost or error means the holder is working without a lease.", rbLockRenewals},
				// No thresholds: the healthy renewals share the axis.
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.LockRenewals, []string{keyGroupLabel, "result"}), "{{key_group}} {{result}}"}},
			}},
		}, {
			title: "Symptom: the cache serves stale data or misses",
			panels: []panel{{
				title: "Cache lookups by result (share)",
				help: help{"Share of lookups that were hit, stale (served while refreshing), miss, coalesced (waited for another caller's load), fallback (Redis unavailable) or error, per key group.",
					"mostly hit; stale a small share; no fallback or error.", rbStaleServes},
				// No thresholds: the stale share's would colour every result.
				unit: units.PercentUnit, max: 1, stacked: true,
				targets: []target{{x.ratioOfTotal(s.CacheLookups, "result", kg), "{{key_group}} {{result}}"}},
			}, {
				title: "Stale age served p50 / p99",
				help: help{"How far past its fresh TTL a served stale value was.",
					"a few refresh durations; growing age means refreshes do not land (stale-forever).", rbStaleForever},
				unit: units.Seconds,
				targets: []target{
					{x.quantile(0.5, s.StaleAge, kg), "p50 {{key_group}}"},
					{x.quantile(0.99, s.StaleAge, kg), "p99 {{key_group}}"},
				},
			}, {
				title: "Miss bursts",
				help: help{"Windows in which a key group's misses reached the burst threshold: a stampede in progress.",
					"0; bursts right after a group's keys expire together point at missing TTL jitter.", rbMissBurst},
				// The ticket compares bursts per minute over its window.
				unit: units.OpsPerSecond, scale: notComparable,
				targets: []target{{x.rate(s.MissBursts, kg), "{{key_group}}"}},
			}},
		}, {
			title: "Cause: refreshes fail (stale-forever)",
			panels: []panel{{
				title: "Loader refresh failures",
				help: help{"Background refreshes of stale values whose loader failed.",
					"0; steady failures keep serving stale data until the hard TTL.", rbStaleForever},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.LoaderRefreshFailures, kg), "{{key_group}}"}},
			}, {
				title: "Consecutive loader failures",
				help: help{"Longest current run of failed refreshes among the group's keys.",
					"0 or 1; a growing run is stale-forever.", rbStaleForever},
				unit: units.Short, scale: alertValue,
				targets: []target{{x.agg("max", s.LoaderConsecutiveFailures, kg), "{{key_group}}"}},
			}, {
				title: "Hard-TTL refusals",
				help: help{"Lookups that found only data past its hard TTL and refused to serve it.",
					"0; refusals mean the source has been failing for longer than the hard TTL.", rbCacheErrors},
				// No thresholds: the alert compares the share of lookups
				// that end in an error, refused or not.
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.HardTTLExpired, kg), "{{key_group}}"}},
			}},
		}, {
			title: "Cause: the source is called too often, or is slow",
			panels: []panel{{
				title: "Loader amplification (loader calls per kept result)",
				help: help{"Loader calls per call whose result was kept: calls divided by calls less the loaded values thrown away because the key was invalidated or the refresh claim passed to another loader while loading. Above 1, loads overlapped: a stampede got through the coalescing, or leases expire before loads end.",
					"exactly 1.", rbLoaderAmplified},
				unit: units.Short, scale: alertValue,
				targets: []target{{e.amplification, "{{key_group}}"}},
			}, {
				title: "Loader calls by result",
				help: help{"Calls that reached the source by result; rejected means the fallback concurrency limit refused them.",
					"about one per refresh; no errors or rejections.", rbLoaderAmplified},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.LoaderCalls, []string{keyGroupLabel, "result"}), "{{key_group}} {{result}}"}},
			}, {
				title: "Loader duration p50 / p99",
				help: help{"Loader call duration, per key group and result.",
					"well below the refresh claim TTL (`CacheOptions.RefreshClaimTTL`) and the fresh TTL.", rbRecompute},
				unit: units.Seconds,
				targets: []target{
					{x.quantile(0.5, s.LoaderDuration, []string{keyGroupLabel, "result"}), "p50 {{key_group}} {{result}}"},
					{x.quantile(0.99, s.LoaderDuration, []string{keyGroupLabel, "result"}), "p99 {{key_group}} {{result}}"},
				},
			}},
		}, {
			title: "Consequence: old data over new, work done twice",
			panels: []panel{{
				title: "Write skew and refused stale writes",
				help: help{"Versioned writes rejected because a newer version was stored, and loaded values not stored because the key was invalidated or the refresh claim moved on while loading.",
					"0 write skew; refused stale writes are prevented damage, rare.", rbWriteSkew},
				// No thresholds: the refused stale writes share the axis.
				unit: units.OpsPerSecond,
				targets: []target{
					{x.rate(s.WriteSkew, kg), "write skew {{key_group}}"},
					{x.rate(s.StaleWritesRefused, kg), "stale write refused {{key_group}}"},
				},
			}, {
				title: "Duplicate version writes",
				help: help{"Versioned writes of a version already stored: the same work done twice.",
					"0.", rbDuplicateWork},
				unit: units.OpsPerSecond, scale: anyEvent,
				targets: []target{{x.rate(s.DuplicateVersionWrites, kg), "{{key_group}}"}},
			}, {
				title: "Idempotency checks by result",
				help: help{"Idempotency-key checks: first (work proceeds) or duplicate (work skipped).",
					"duplicates only when producers retry; no errors.", rbDuplicateWork},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.IdempotencyChecks, []string{keyGroupLabel, "result"}), "{{key_group}} {{result}}"}},
			}},
		}, {
			title: "Back-pressure: retries, backoff, circuit breaker",
			panels: []panel{{
				title: "Retries",
				help: help{"Retries after a busy lock or refresh claim, each after a full-jitter backoff.",
					"a small fraction of lock attempts.", rbRetries},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.Retries, kg), "{{key_group}}"}},
			}, {
				title: "Backoff delay p50 / p99",
				help: help{"Backoff delays chosen before retries.",
					"spread between 0 and the cap (full jitter); a p50 at the cap means retries are exhausted.", rbRetries},
				unit: units.Seconds,
				targets: []target{
					{x.quantile(0.5, s.BackoffDelay, kg), "p50 {{key_group}}"},
					{x.quantile(0.99, s.BackoffDelay, kg), "p99 {{key_group}}"},
				},
			}, {
				title: "Circuit breaker state",
				help: help{"State of the breaker guarding Redis: 0 closed, 1 half-open, 2 open (lookups go straight to the source).",
					"0.", rbBreakerOpen},
				// The alert compares the state over a window of it: the
				// same scale of states.
				unit: units.Short, scale: alertValue,
				targets: []target{{x.agg("max", s.CircuitBreakerState, []string{"client"}), "{{client}}"}},
			}, {
				title: "Fallback calls in flight",
				help: help{"Direct-to-source calls in flight while Redis is unavailable, bounded by the concurrency limit.",
					"0; at the limit, callers are being rejected.", rbBreakerOpen},
				unit:    units.Short,
				targets: []target{{x.agg("sum", s.LoaderInFlight, []string{"client"}), "{{client}}"}},
			}, {
				title: "Fallbacks by cause",
				help: help{"Lookups sent to the source directly because Redis failed, by the failure: redis_down (refused or broken connections), redis_error (error replies), timeout (round trips unanswered until the breaker opened). A slow process never falls back.",
					"0.", rbBreakerOpen},
				// The breaker alert reads the breaker's state, not these.
				unit: units.OpsPerSecond, scale: notComparable,
				targets: []target{{x.rate(s.CacheFallbacks, []string{"client", "cause"}), "{{client}} {{cause}}"}},
			}},
		}, {
			title: "Labels: key groups",
			panels: []panel{{
				title: "Key-group overflow",
				help: help{"Classifications folded into the `other` key group because the cap on distinct groups was reached.",
					"0; overflow hides which keys are hot: add a rule for the missing groups.", rbKeyGroups},
				unit: units.OpsPerSecond, scale: anyEvent,
				targets: []target{{x.rate(s.KeyGroupOverflow, nil), "overflow"}},
			}},
		}},
	}
	return b, x.err
}

// contentionExprs are the queries the board's first row shares with the
// panels below it.
type contentionExprs struct {
	// contention is the share of busy first attempts of waiting callers,
	// per key group; tryOnceBusy the same of try-once acquisitions.
	contention, tryOnceBusy string
	// staleShare is the share of stale lookups, per key group.
	staleShare string
	// errorShare is the share of lookups that ended in an error, per
	// key group.
	errorShare string
	// acquireP99 is the lock acquire p99 of waiting callers, per key group.
	acquireP99 string
	// amplification is loader calls per kept result, per key group.
	amplification string
}

func contentionQueries(x *exprs) contentionExprs {
	firstTry := x.is(s.LockAttempts, "attempt", "first")
	busy := x.is(s.LockAttempts, "result", "busy")
	// The share of busy first attempts in one mode.
	busyShare := func(mode string) string {
		m := x.is(s.LockAttempts, s.ModeLabel, mode)
		first := x.rate(s.LockAttempts, kg, firstTry, m)
		return ratio(orZero(x.rate(s.LockAttempts, kg, firstTry, busy, m), first), first)
	}
	lookups := x.rate(s.CacheLookups, kg)
	loaderCalls := x.rate(s.LoaderCalls, kg, x.is(s.LoaderCalls, "result", "success", "error"))
	return contentionExprs{
		contention:  busyShare(s.ModeWait),
		tryOnceBusy: busyShare(s.ModeTryOnce),
		staleShare:  ratio(orZero(x.rate(s.CacheLookups, kg, x.is(s.CacheLookups, "result", "stale")), lookups), lookups),
		errorShare:  ratio(orZero(x.rate(s.CacheLookups, kg, x.is(s.CacheLookups, "result", "error")), lookups), lookups),
		acquireP99:  x.quantile(0.99, s.LockAcquireDuration, kg, x.is(s.LockAcquireDuration, s.ModeLabel, s.ModeWait)),
		amplification: ratio(loaderCalls, "("+loaderCalls+" - "+
			orZero(x.rate(s.StaleWritesRefused, kg), loaderCalls)+")"),
	}
}
