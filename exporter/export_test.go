package exporter

import "time"

// SetLockPassShare sets the fraction of the interval the lock pass is
// spread over, for benchmarks that compare shares (default lockPassShare).
func SetLockPassShare(e *Exporter, share float64) { e.lockShare = share }

// LockPassShare is the default fraction of the interval the lock pass is
// spread over.
const LockPassShare = lockPassShare

// SetMinPaceSleep sets how far ahead of schedule a paced pass gets before
// it sleeps, for benchmarks that compare values (default minPaceSleep).
func SetMinPaceSleep(e *Exporter, d time.Duration) { e.minSleep = d }

// MinPaceSleep is the default of SetMinPaceSleep.
const MinPaceSleep = minPaceSleep
