package shard

import (
	"os"
	"testing"
	"time"
)

// DelayFences makes every fence's timer callback run d late, as after a
// process pause when the timers run after the lanes have resumed; the
// returned func undoes it.
func DelayFences(d time.Duration) (restore func()) {
	fenceLate.Store(int64(d))
	return func() { fenceLate.Store(0) }
}

// TestMain runs every test with illegal lease state moves panicking
// (strictStates), so a move the table in state.go does not list fails
// the test that makes it.
func TestMain(m *testing.M) {
	strictStates.Store(true)
	os.Exit(m.Run())
}
