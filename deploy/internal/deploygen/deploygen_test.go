package deploygen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const root = "../../.."

// TestGeneratedFilesUpToDate fails while a committed file of the chart or
// the mixin differs from what `go generate ./...` writes, or one it no
// longer writes is left.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./... and commit the result", path)
		}
	}
	stale, err := Stale(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stale {
		t.Errorf("%s is no longer generated: run go generate ./... and commit the result", path)
	}
}

func TestCamelCase(t *testing.T) {
	for in, want := range map[string]string{
		"service_selector":         "serviceSelector",
		"lock_acquire_p99_warning": "lockAcquireP99Warning",
		"event_window":             "eventWindow",
	} {
		if got := CamelCase(in); got != want {
			t.Errorf("CamelCase(%q) = %q, want %q", in, got, want)
		}
	}
}
