package alerts_test

import (
	"fmt"
	"strings"

	"github.com/cachewatch/cachewatch/alerts"
)

// Load the defaults, raise one threshold, and find the alert an end-to-end
// test can cause on purpose: a lock key written without a TTL.
func Example() {
	cfg := alerts.DefaultConfig()
	if err := cfg.Set("locks_without_ttl_for", "30s"); err != nil {
		panic(err)
	}
	all, err := alerts.Alerts(cfg)
	if err != nil {
		panic(err)
	}
	for _, a := range all {
		if a.Name == "CachewatchLocksWithoutTTL" {
			fmt.Println(a.Severity, a.For, a.Op, a.Threshold)
			// The first line compares the value; the rest keeps the alert
			// firing while the exporter is blind.
			fmt.Println(strings.SplitN(a.Expr, "\n", 2)[0])
			_, anchor, _ := strings.Cut(a.Annotations["runbook_url"], "#")
			fmt.Println(anchor)
		}
	}
	// Output:
	// critical 30s > 0
	// max by (job, target, node, key_group) (cachewatch_exporter_locks_without_ttl{job="cachewatch-exporter"}) > 0
	// cachewatchlockswithoutttl
}
