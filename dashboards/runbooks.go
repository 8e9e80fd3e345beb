package dashboards

import "strings"

// RunbookURL is where panel descriptions link to: the runbooks page of the
// repository, one section per alert. Section anchors are the lower-cased
// alert name.
const RunbookURL = "https://github.com/cachewatch/cachewatch/blob/main/docs/runbooks.md"

// runbook names the runbook section a panel's reader should turn to: the
// section of the alert that covers the panel's signal, or, where no alert
// does, a section named in words.
type runbook struct {
	alert   string // Cachewatch… alert name; its section's anchor is the lower-cased name
	section string // used when no alert covers the panel
}

func (r runbook) markdown() string {
	if r.alert != "" {
		return "[" + r.alert + "](" + RunbookURL + "#" + strings.ToLower(r.alert) + ")"
	}
	return "docs/runbooks.md, section \"" + r.section + "\""
}

// Alerts (package alerts) whose runbook sections the panels point at; the
// names must match the alert definitions there.
var (
	rbLockAcquireSlow    = runbook{alert: "CachewatchLockAcquireLatencyHigh"}
	rbLockContention     = runbook{alert: "CachewatchLockContentionHigh"}
	rbLocksLost          = runbook{alert: "CachewatchLocksLost"}
	rbLockRenewals       = runbook{alert: "CachewatchLockRenewalsFailing"}
	rbStaleServes        = runbook{alert: "CachewatchStaleServeRatioHigh"}
	rbStaleForever       = runbook{alert: "CachewatchStaleForever"}
	rbHardTTL            = runbook{alert: "CachewatchCacheErrors"}
	rbLoaderAmplified    = runbook{alert: "CachewatchLoaderAmplification"}
	rbMissBurst          = runbook{alert: "CachewatchMissBurst"}
	rbWriteSkew          = runbook{alert: "CachewatchWriteSkew"}
	rbScriptSlow         = runbook{alert: "CachewatchScriptLatencyHigh"}
	rbCommandErrors      = runbook{alert: "CachewatchCommandErrorsHigh"}
	rbPoolTimeouts       = runbook{alert: "CachewatchPoolTimeouts"}
	rbBreakerOpen        = runbook{alert: "CachewatchCircuitBreakerOpen"}
	rbLocksWithoutTTL    = runbook{alert: "CachewatchLocksWithoutTTL"}
	rbLocksLongHeld      = runbook{alert: "CachewatchLocksLongHeld"}
	rbExpirySync         = runbook{alert: "CachewatchExpirySynchronised"}
	rbServerHitRatio     = runbook{alert: "CachewatchServerHitRatioDrop"}
	rbQueueBacklog       = runbook{alert: "CachewatchQueueOldestAgeHigh"}
	rbStreamLag          = runbook{alert: "CachewatchStreamLagHigh"}
	rbStreamPending      = runbook{alert: "CachewatchStreamPendingStuck"}
	rbExporterDown       = runbook{alert: "CachewatchExporterSampleFailing"}
	rbExporterFailing    = runbook{alert: "CachewatchExporterSampleErrors"}
	rbExporterCoverage   = runbook{alert: "CachewatchExporterKeyspaceCoverageLow"}
	rbDuplicateWork      = runbook{alert: "CachewatchDuplicateRecompute"}
	rbRetries            = runbook{section: "Retries and backoff"}
	rbRecompute          = runbook{section: "Slow recomputes"}
	rbCommandLatency     = runbook{section: "Command latency"}
	rbPipelines          = runbook{section: "Pipelines and transactions"}
	rbKeyGroups          = runbook{alert: "CachewatchKeyGroupOverflow"}
	rbServerResources    = runbook{section: "Server memory, evictions and clients"}
	rbKeysWithoutTTL     = runbook{section: "Keys without TTL"}
	rbServerCommandStats = runbook{section: "Server command statistics"}
)
