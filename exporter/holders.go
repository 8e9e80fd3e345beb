package exporter

import (
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/signals"
)

// holderLabels are the labels of a holder: its service and host, or
// "opaque" for a value that names nobody.
type holderLabels struct{ service, host string }

// collectHolders sends, for each holder of the group's longest-held locks,
// how long it has held its longest-held one as of asOf (the moment the
// lock figures describe). Several of those locks held by one service on
// one host are one series: at most len(held) series per group.
func collectHolders(m emitter, group string, held []snapshot.HeldLock, asOf time.Time) {
	if len(held) == 0 {
		return
	}
	longest := make(map[holderLabels]time.Duration, len(held))
	order := make([]holderLabels, 0, len(held))
	for _, h := range held {
		k := holderLabels{h.Holder.Service, h.Holder.Host}
		if h.Holder.Format == snapshot.Opaque {
			k = holderLabels{service: snapshot.Opaque}
		}
		d, seen := longest[k]
		if !seen {
			order = append(order, k)
		}
		longest[k] = max(d, asOf.Sub(h.Since), 0)
	}
	for _, k := range order {
		m.gauge(signals.LockHolderHeld, longest[k].Seconds(), group, k.service, k.host)
	}
}
