package exporter

import (
	"fmt"

	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// What a sample found, as the sampler publishes it.
type (
	NodeSnapshot     = snapshot.Node
	ErrorKey         = snapshot.ErrorKey
	Pass             = snapshot.Pass
	GroupStats       = snapshot.GroupStats
	ExpiringWithin   = snapshot.ExpiringWithin
	HotKey           = snapshot.HotKey
	ServerStats      = snapshot.ServerStats
	CommandStat      = snapshot.CommandStat
	CommandHistogram = snapshot.CommandHistogram
	QueueStats       = snapshot.QueueStats
	StreamGroup      = snapshot.StreamGroup
	QueueRead        = snapshot.QueueRead
	StageError       = snapshot.StageError
	Stage            = snapshot.Stage
	Class            = snapshot.Class
)

// Stages and classes of sample errors.
const (
	StageConnect       = snapshot.StageConnect
	StageInfo          = snapshot.StageInfo
	StageLatency       = snapshot.StageLatency
	StageScan          = snapshot.StageScan
	StageKeys          = snapshot.StageKeys
	StageLocks         = snapshot.StageLocks
	StageQueues        = snapshot.StageQueues
	StageNotifications = snapshot.StageNotifications

	ClassNoPerm      = snapshot.ClassNoPerm
	ClassAuth        = snapshot.ClassAuth
	ClassTimeout     = snapshot.ClassTimeout
	ClassConnection  = snapshot.ClassConnection
	ClassClusterDown = snapshot.ClassClusterDown
	ClassMalformed   = snapshot.ClassMalformed
	ClassOther       = snapshot.ClassOther
)

// Errors of samples.
var (
	ErrMalformed     = sampler.ErrMalformed
	ErrBadReply      = sampler.ErrBadReply
	ErrReplyTooLarge = sampler.ErrReplyTooLarge
	ErrScanLoop      = sampler.ErrScanLoop
	ErrTLSMismatch   = sampler.ErrTLSMismatch
)

// NotifyMode says whether the exporter follows lock keys through Redis
// keyspace notifications.
type NotifyMode int

// Notification modes.
const (
	NotifyAuto NotifyMode = iota
	NotifyOff
	NotifyEnable
	NotifyExisting
)

// NotifyFlags are the notify-keyspace-events classes the lock index needs.
const NotifyFlags = sampler.NotifyFlags

var notifyModes = map[NotifyMode]sampler.Notify{NotifyAuto: sampler.NotifyAuto, NotifyOff: sampler.NotifyOff,
	NotifyEnable: sampler.NotifyEnable, NotifyExisting: sampler.NotifyExisting}

func (m NotifyMode) notify() sampler.Notify { return notifyModes[m] }

// String returns "auto", "off", "enable" or "existing".
func (m NotifyMode) String() string { return string(m.notify()) }

// NotifyModes lists every mode, the default first.
var NotifyModes = []NotifyMode{NotifyAuto, NotifyExisting, NotifyEnable, NotifyOff}

// ParseNotifyMode parses "auto", "existing", "enable" or "off".
func ParseNotifyMode(s string) (NotifyMode, error) {
	for _, m := range NotifyModes {
		if s == m.String() {
			return m, nil
		}
	}
	return NotifyAuto, fmt.Errorf("exporter: notification mode %q: want auto, existing, enable or off", s)
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
