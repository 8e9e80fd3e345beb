package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/alerts"
)

func TestAlertsCommandWrites(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "thresholds.yaml")
	if err := os.WriteFile(cfgFile, []byte("lock_contention_warning: 0.08\nstale_ratio_warning: 0.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	r := runCommand(t, "alerts", "--out", out, "--config", cfgFile,
		"--stale-ratio-warning", "0.6", "--exporter-selector", `job="redis-exporter"`)
	if r.code != 0 || !strings.Contains(r.stdout, alerts.RulesFile) {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	rules, err := os.ReadFile(filepath.Join(out, alerts.RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"key_group:cachewatch_lock_contention:ratio_rate5m > 0.08", // from the file
		"key_group:cachewatch_cache_stale:ratio_rate5m > 0.6",      // the flag wins over the file
		`cachewatch_exporter_locks_without_ttl{job="redis-exporter"}`,
	} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("rules lack %q", want)
		}
	}
	for _, name := range []string{alerts.GrafanaFile, alerts.AlertmanagerFile} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestAlertsCommandUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badKey := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badKey, []byte("lock_contension_warning: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRatio := filepath.Join(dir, "ratio.yaml")
	if err := os.WriteFile(badRatio, []byte("stale_ratio_warning: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no out", nil, "--out DIR is required"},
		{"unknown flag", []string{"--out", dir, "--lock-contention", "0.1"}, "--lock-contention"},
		{"bad number", []string{"--out", dir, "--lock-contention-warning", "lots"}, `--lock-contention-warning: "lots" is not a number`},
		{"ratio above 1", []string{"--out", dir, "--lock-contention-warning", "5"}, "--lock-contention-warning: is a ratio from 0 to 1"},
		{"bad duration", []string{"--out", dir, "--lock-acquire-for", "soon"}, "--lock-acquire-for"},
		{"bad selector", []string{"--out", dir, "--service-selector", "job=api"}, "--service-selector"},
		{"unknown key in file", []string{"--out", dir, "--config", badKey}, "unknown key lock_contension_warning"},
		{"bad value in file", []string{"--out", dir, "--config", badRatio}, "stale_ratio_warning: is a ratio"},
		{"missing file", []string{"--out", dir, "--config", badKey + ".nope"}, "--config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCommand(t, "alerts", tc.args...)
			if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q: want exit 2 and one line with %q", r.code, r.stderr, r.stdout, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("a rejected run wrote files: %v", entries)
	}
}
