package shard

// SetRosterSmall sets rosterSmall (the most members read whole every pass
// with the roster) and returns a func that restores it.
func SetRosterSmall(n int) (restore func()) {
	old := rosterSmall
	rosterSmall = n
	return func() { rosterSmall = old }
}
