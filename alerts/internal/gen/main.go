// Command gen rewrites the committed files of package alerts: the rule
// file, its promtool unit tests, the Grafana provisioning file and the
// Alertmanager configuration (all for DefaultConfig), and docs/runbooks.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cachewatch/cachewatch/alerts"
)

func main() {
	out := flag.String("out", "generated", "directory of the generated files")
	runbooks := flag.String("runbooks", "", "path of docs/runbooks.md (empty: not written)")
	flag.Parse()
	if err := run(*out, *runbooks); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out, runbooks string) error {
	if err := alerts.WriteFiles(out, alerts.DefaultConfig()); err != nil {
		return err
	}
	tests, err := alerts.PromtoolTests(alerts.RulesFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, alerts.RulesTestFile), tests, 0o644); err != nil {
		return err
	}
	if runbooks == "" {
		return nil
	}
	md, err := alerts.Runbooks(alerts.DefaultConfig())
	if err != nil {
		return err
	}
	return os.WriteFile(runbooks, md, 0o644)
}
