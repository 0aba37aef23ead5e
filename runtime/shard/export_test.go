package shard

import (
	"context"
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

// BeforeHold runs f in every take between the store's answer and the
// lease's being held; the returned func undoes it.
func BeforeHold(f func()) (restore func()) {
	beforeHold.Store(&f)
	return func() { beforeHold.Store(nil) }
}

// HeartbeatNow writes c's member heartbeat at once, as its heartbeat loop
// does.
func (c *Coordinator) HeartbeatNow(ctx context.Context) error { return c.heartbeat(ctx) }

// Fences returns the fence of each lease c holds, by shard id.
func (c *Coordinator) Fences() map[string]time.Time {
	out := map[string]time.Time{}
	for _, o := range c.snapshot() {
		out[o.shard] = c.epoch.Add(time.Duration(o.until.Load()))
	}
	return out
}
