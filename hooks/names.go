package hooks

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/emit"
)

// ErrNameTaken is returned by New when another hook on the same registry
// already uses the Name: their command, script and pool series would
// merge, or collide at every scrape. Give each hooked client its own Name.
// It is the same value as instrument.ErrNameTaken.
var ErrNameTaken = emit.ErrNameTaken

// nameClaim holds a hook's Name on a registry. The registry refuses a
// second collector that describes the same descriptor, so the registry
// itself, not process-wide state, knows which names its hooks use; the
// claim lives as long as the registry, and a wrapping registerer (with its
// own const labels) is its own namespace.
//
// The descriptor is never collected, so nothing shows in a scrape.
type nameClaim struct{ desc *prometheus.Desc }

func (c nameClaim) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c nameClaim) Collect(chan<- prometheus.Metric)    {}

// claimName registers name as a hook's on reg, or fails with ErrNameTaken.
func claimName(reg prometheus.Registerer, name string) error {
	desc := prometheus.NewDesc("cachewatch_hook_name_claim", "Marks a hook's Name as taken on this registry; never exported.",
		nil, prometheus.Labels{"client": name})
	err := reg.Register(nameClaim{desc: desc})
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		return fmt.Errorf("hooks: %w: %q is the Name of another hook (set Options.Name per hooked client)", ErrNameTaken, name)
	case err != nil:
		return fmt.Errorf("hooks: claim name %q: %w", name, err)
	}
	return nil
}
