package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A password file every user of the machine may read is used, with one
// warning naming the file (never the password); one readable by its owner
// (or group) only gets none. A targets file naming the file twice warns
// once.
func TestPasswordFileReadableByAllWarnsOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const password = "file-secret-7"
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	const warning = "readable by every user"
	for _, c := range []struct {
		mode     os.FileMode
		warnings int
	}{{0o644, 1}, {0o604, 1}, {0o600, 0}, {0o640, 0}} {
		path := filepath.Join(t.TempDir(), "pw")
		if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		code := run(ctx, []string{"doctor", "--redis.url", "redis://" + srv.Addr, "--redis.password-file", path,
			"--interval", "10ms"}, io.Discard, &stderr)
		if code != 0 && code != exitIncomplete || strings.Contains(stderr.String(), "WRONGPASS") {
			t.Fatalf("mode %v: exit %d: %s", c.mode, code, stderr.String())
		}
		if got := strings.Count(stderr.String(), warning); got != c.warnings || c.warnings > 0 && !strings.Contains(stderr.String(), path) {
			t.Errorf("mode %v: %d warnings, want %d:\n%s", c.mode, got, c.warnings, stderr.String())
		}
		if strings.Contains(stderr.String(), password) {
			t.Fatalf("mode %v: the password was logged:\n%s", c.mode, stderr.String())
		}
	}

	dir := t.TempDir()
	path, targets := filepath.Join(dir, "pw"), filepath.Join(dir, "targets.yml")
	if err := os.WriteFile(path, []byte(password), 0o644); err != nil {
		t.Fatal(err)
	}
	file := "targets:\n"
	for _, name := range []string{"a", "b"} {
		file += "  - name: " + name + "\n    addrs: [\"" + srv.Addr + "\"]\n    password_file: " + path + "\n"
	}
	if err := os.WriteFile(targets, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel() // the targets are read, then the exporter stops at once
	var stderr bytes.Buffer
	run(stopped, []string{"exporter", "--targets.file", targets, "--web.listen-address", freeListenAddr(t)}, io.Discard, &stderr)
	if got := strings.Count(stderr.String(), warning); got != 1 {
		t.Errorf("two targets sharing a password file readable by all: %d warnings, want 1:\n%s", got, stderr.String())
	}
}
