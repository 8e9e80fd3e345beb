package exporter

// regroupLocks classifies the indexed lock keys again when the lock
// classifier has learnt something since they were classified (its epoch
// moved): a lock indexed while its group was still being learnt (under
// "other") moves to its group, however long it stays held.
func (e *Exporter) regroupLocks(n *node) {
	x := &n.locks
	epoch := e.lockGroups.Epoch()
	if epoch == x.groupsEpoch {
		return
	}
	for key, en := range x.entries {
		en.group = e.lockGroups.Classify(key)
		x.entries[key] = en
	}
	x.groupsEpoch = epoch
}
