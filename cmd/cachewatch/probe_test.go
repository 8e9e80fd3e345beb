package main

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

// With --probe.modules-file the exporter serves /probe for any target and
// keeps /metrics to its own process and Go metrics.
func TestExporterProbeMode(t *testing.T) {
	srv := redistest.Start(t)
	modules := writeFile(t, t.TempDir(), "modules.yml", "modules:\n  default: {}\n")
	listen := freeListenAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"exporter", "--probe.modules-file", modules, "--web.listen-address", listen,
			"--sample.interval", "1s"}, io.Discard, &stderr)
	}()
	target := "redis://" + srv.Addr
	body := waitForBody(t, "http://"+listen+"/probe?target="+url.QueryEscape(target), "", "",
		`cachewatch_exporter_up{node="`+srv.Addr+`",target="`+target+`"} 1`)
	metrictest.PromtoolCheck(t, body)
	self := waitForBody(t, "http://"+listen+"/metrics", "", "", "go_goroutines")
	if strings.Contains(self, "cachewatch_exporter_up") || strings.Contains(self, "target=") {
		t.Errorf("/metrics serves a target's series in probe mode:\n%s", self)
	}
	if code := httpStatus(t, "http://"+listen+"/probe?target="+url.QueryEscape("redis://u:hunter2@h:1"), "", ""); code != 400 {
		t.Errorf("a password in the target: %d, want 400", code)
	}
	self = waitForBody(t, "http://"+listen+"/metrics", "", "", `cachewatch_exporter_probe_refused_total{reason="bad_request"} 1`)
	if !strings.Contains(self, "cachewatch_exporter_probe_targets 1\n") {
		t.Errorf("/metrics does not count the one probed target:\n%s", self)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// Probe mode's flags are checked at start, naming the flag.
func TestProbeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	modules := writeFile(t, dir, "modules.yml", "modules:\n  default: {}\n")
	for name, c := range map[string]struct {
		args []string
		msg  string
	}{
		"with redis.url":    {[]string{"--probe.modules-file", modules, "--redis.url", "redis://h:1"}, "a probing exporter samples only the targets it is probed for"},
		"with targets":      {[]string{"--probe.modules-file", modules, "--targets.file", writeFile(t, dir, "t.yml", "targets: [{name: a, addrs: ['h:1']}]")}, "--probe.modules-file with --targets.file"},
		"missing file":      {[]string{"--probe.modules-file", dir + "/none.yml"}, "--probe.modules-file: probe: modules file: open"},
		"password inline":   {[]string{"--probe.modules-file", writeFile(t, dir, "m.yml", "modules:\n  a:\n    password: hunter2\n")}, "unknown field password (use password_file or password_env)"},
		"idle timeout":      {[]string{"--probe.modules-file", modules, "--probe.idle-timeout", "0s"}, "--probe.idle-timeout must be positive"},
		"max targets":       {[]string{"--probe.modules-file", modules, "--probe.max-targets", "0"}, "--probe.max-targets must be positive"},
		"bad sampling flag": {[]string{"--probe.modules-file", modules, "--sample.max-keys", "0"}, "--sample.max-keys must be positive"},
	} {
		var errOut bytes.Buffer
		code := run(context.Background(), append([]string{"exporter"}, c.args...), io.Discard, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), c.msg) || strings.Contains(errOut.String(), "hunter2") {
			t.Errorf("%s: code %d, stderr %q; want 2 and %q", name, code, errOut.String(), c.msg)
		}
	}
}
