package shard

import "time"

// DelayFences makes every fence's timer callback run d late, as after a
// process pause when the timers run after the lanes have resumed; the
// returned func undoes it.
func DelayFences(d time.Duration) (restore func()) {
	fenceLate.Store(int64(d))
	return func() { fenceLate.Store(0) }
}
