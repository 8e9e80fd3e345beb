package dashboards

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cachewatch/cachewatch/alerts"
)

// RunbookURL is where panels link to: the runbooks page of the repository,
// one section per alert, the page the alerts' runbook_url points at.
// Section anchors are the lower-cased alert name.
const RunbookURL = alerts.DefaultRunbookBaseURL

// runbook names the runbook section a panel's reader should turn to: the
// section of the alert that covers the panel's signal, or, where no alert
// does, a section named in words.
type runbook struct {
	alert   string // Cachewatch… alert name; its section's anchor is the lower-cased name
	section string // used when no alert covers the panel
}

func (r runbook) markdown() string {
	if r.alert != "" {
		return "[" + r.alert + "](" + r.url() + ")"
	}
	return "docs/runbooks.md, section \"" + r.section + "\""
}

// url is the section's address: the alert's anchor, or the anchor GitHub
// gives the section's heading.
func (r runbook) url() string {
	if r.alert != "" {
		return RunbookURL + "#" + alerts.RunbookAnchor(r.alert)
	}
	return RunbookURL + "#" + headingAnchor(r.section)
}

// title is the panel link's text.
func (r runbook) title() string {
	if r.alert != "" {
		return "Runbook: " + r.alert
	}
	return "Runbook: " + r.section
}

// check fails when the runbook names an alert package alerts does not
// define: a renamed or removed alert must not leave a panel pointing at
// nothing.
func (r runbook) check() error {
	if r.alert != "" && !slices.Contains(alerts.AlertNames(), r.alert) {
		return fmt.Errorf("dashboards: the runbook names alert %s, which package alerts does not define", r.alert)
	}
	return nil
}

// headingAnchor is the fragment GitHub gives a Markdown heading: lower
// case, punctuation dropped, spaces as dashes.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Alerts (package alerts) whose runbook sections the panels point at; the
// names must match the alert definitions there (runbook.check).
var (
	rbLockAcquireSlow    = runbook{alert: "CachewatchLockAcquireLatencyHigh"}
	rbLockContention     = runbook{alert: "CachewatchLockContentionHigh"}
	rbLocksLost          = runbook{alert: "CachewatchLocksLost"}
	rbLockRenewals       = runbook{alert: "CachewatchLockRenewalsFailing"}
	rbStaleServes        = runbook{alert: "CachewatchStaleServeRatioHigh"}
	rbStaleForever       = runbook{alert: "CachewatchStaleForever"}
	rbCacheErrors        = runbook{alert: "CachewatchCacheAvailabilityBudgetBurn"}
	rbLoaderAmplified    = runbook{alert: "CachewatchLoaderAmplification"}
	rbMissBurst          = runbook{alert: "CachewatchMissBurst"}
	rbWriteSkew          = runbook{alert: "CachewatchWriteSkew"}
	rbScriptSlow         = runbook{alert: "CachewatchScriptLatencyHigh"}
	rbServerScriptsSlow  = runbook{alert: "CachewatchRedisScriptsSlow"}
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
	rbDuplicateWork      = runbook{alert: "CachewatchDuplicateVersionWrites"}
	rbRetries            = runbook{section: "Retries and backoff"}
	rbRecompute          = runbook{section: "Slow loads"}
	rbCommandLatency     = runbook{section: "Command latency"}
	rbPipelines          = runbook{section: "Pipelines and transactions"}
	rbKeyGroups          = runbook{alert: "CachewatchKeyGroupOverflow"}
	rbServerResources    = runbook{section: "Server memory, evictions and clients"}
	rbKeysWithoutTTL     = runbook{section: "Keys without TTL"}
	rbServerCommandStats = runbook{section: "Server command statistics"}
)
