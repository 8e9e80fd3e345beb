package exporter

// SetLockPassShare sets the fraction of the interval the lock pass is
// spread over, for benchmarks that compare shares (default lockPassShare).
func SetLockPassShare(e *Exporter, share float64) { e.lockShare = share }

// LockPassShare is the default fraction of the interval the lock pass is
// spread over.
const LockPassShare = lockPassShare
