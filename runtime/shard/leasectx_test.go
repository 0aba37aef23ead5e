package shard

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Issue 29, defect 5 (fleettest/dst mix pause): a record's lease context
// (Record.Lease, which a handler's context follows) reports the lease lost
// as soon as the monotonic clock is past its fence, before the fence's
// timer has run (after a pause a thawed handler may look first), and its
// Deadline is the fence.
func TestRecordLeaseEndsByTheClockBeforeTheFenceTimer(t *testing.T) {
	// On a virtual clock: on a loaded machine a real one may pass the
	// 100 ms fence between the take and the first look.
	synctest.Test(t, func(t *testing.T) {
		defer func() { fenceLate.Store(0) }()
		fenceLate.Store(int64(time.Hour)) // the fence's timer runs late: a pause
		store := lease.NewMemory()
		ctx := context.Background()
		l := lease.Lease{Key: "s/shard-0", ShardID: "shard-0"}
		if _, err := store.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{Stream: "s", Client: struct{ kinesisapi.API }{}, Leases: store, Owner: "a",
			Sink:  func(context.Context, []Record) (int, error) { return 0, nil },
			Renew: 20 * time.Millisecond, Failover: 100 * time.Millisecond, Liveness: LivenessPerLease})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.takeLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		o := c.owned["shard-0"]
		c.mu.Unlock()
		r := Record{wm: &watermark{until: &o.until, epoch: c.epoch, lost: o.lctx}} // as pass.go's session
		lc := r.Lease()
		fence := c.epoch.Add(time.Duration(o.until.Load()))
		if d, ok := lc.Deadline(); !ok || !d.Equal(fence) {
			t.Fatalf("Deadline() = %v, %v; want the fence %v", d, ok, fence)
		}
		if err := lc.Err(); err != nil {
			t.Fatalf("Err() = %v before the fence", err)
		}
		time.Sleep(time.Until(fence) + 10*time.Millisecond)
		if o.fctx.Err() != nil {
			t.Fatal("the fence's timer ran: the test needs it late")
		}
		if lc.Err() == nil {
			t.Fatal("Err() = nil past the fence (its timer not run yet)")
		}
		select {
		case <-lc.Done():
		default:
			t.Fatal("Done() open after Err() reported the lease lost")
		}
		// The late timer still fences the lease (and so ends the bubble).
		time.Sleep(time.Hour)
		synctest.Wait()
		if o.fctx.Err() == nil {
			t.Error("the fence's timer ran late and did not fence the lease")
		}
	})
}
