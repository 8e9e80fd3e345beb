package exporter

import (
	"fmt"

	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
)

// NotifyMode says whether the exporter follows lock keys through Redis
// keyspace notifications (--locks.notifications): "auto", "existing",
// "enable" or "off"; "" is NotifyAuto.
type NotifyMode string

// Notification modes.
const (
	// NotifyAuto turns on the notify-keyspace-events classes the lock
	// index needs when the server allows it, and puts the operator's
	// value back on Close; a refusal leaves the lock figures to SCAN
	// passes.
	NotifyAuto NotifyMode = NotifyMode(sampler.NotifyAuto)
	// NotifyExisting follows notifications only when the server already
	// publishes the classes: the exporter never writes its configuration.
	NotifyExisting NotifyMode = NotifyMode(sampler.NotifyExisting)
	// NotifyEnable turns the classes on as NotifyAuto does but leaves them
	// on at Close (a setting several exporters share); a refusal is an
	// error of the sample's notifications stage.
	NotifyEnable NotifyMode = NotifyMode(sampler.NotifyEnable)
	// NotifyOff never subscribes: lock figures come from SCAN passes.
	NotifyOff NotifyMode = NotifyMode(sampler.NotifyOff)
)

// notify is the sampler's mode for m, or an error for a mode that is none
// of the four.
func (m NotifyMode) notify() (sampler.Notify, error) {
	n, err := sampler.ParseNotify(string(m))
	if err != nil {
		return "", fmt.Errorf("exporter: notification mode %q: want auto, existing, enable or off", string(m))
	}
	return n, nil
}

func (m Mode) mode() sampler.Mode {
	switch m {
	case ModeStandalone:
		return sampler.ModeStandalone
	case ModeCluster:
		return sampler.ModeCluster
	}
	return sampler.ModeAuto
}
