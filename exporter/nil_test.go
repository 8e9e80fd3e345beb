package exporter_test

import (
	"testing"

	"github.com/cachewatch/cachewatch/exporter"
)

// What New returns with an error is safe to defer-close.
func TestNilExporterClose(t *testing.T) {
	var e *exporter.Exporter
	if err := e.Close(); err != nil {
		t.Errorf("nil Exporter.Close = %v, want nil", err)
	}
}
