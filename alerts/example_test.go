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
			fmt.Println(a.Severity, a.For)
			fmt.Println(a.Expr)
			_, anchor, _ := strings.Cut(a.Annotations["runbook_url"], "#")
			fmt.Println(anchor)
		}
	}
	// Output:
	// critical 30s
	// max by (job, node, key_group) (cachewatch_exporter_locks_without_ttl{job="cachewatch-exporter"}) > 0
	// cachewatchlockswithoutttl
}
