package shard

import (
	"context"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

func TestLeaseStateMoves(t *testing.T) {
	for _, tc := range []struct {
		from, to leaseState
		ok       bool
	}{
		{stWaiting, stReading, true},
		{stReading, stHanding, true},
		{stHanding, stReading, true}, // postponed
		{stHanding, stGone, true},    // released
		{stEnded, stGone, true},
		{stFenced, stGone, true},
		{stFenced, stReading, false}, // only a new take reads a fenced shard again
		{stGone, stWaiting, false},
		{stGone, stReading, false},
		{stGone, stGone, true},
	} {
		if got := canMove(tc.from, tc.to); got != tc.ok {
			t.Errorf("canMove(%v, %v) = %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}

func TestLeaseStateDerived(t *testing.T) {
	fctx, fence := context.WithCancel(context.Background())
	defer fence()
	o := &owned{shard: "s", fctx: fctx, st: &Stats{}}
	if got := o.stateLocked(); got != stWaiting {
		t.Fatalf("new lease: %v, want waiting", got)
	}
	o.setSession(&session{wm: newWatermark(), cancel: func() {}})
	if got := o.stateLocked(); got != stReading {
		t.Fatalf("with a reader: %v, want reading", got)
	}
	o.setHanding(true)
	if got := o.stateLocked(); got != stHanding {
		t.Fatalf("handing: %v, want handing", got)
	}
	o.setHanding(false)
	o.setLease(lease.Lease{Checkpoint: lease.CheckpointShardEnd}, time.Time{})
	if got := o.stateLocked(); got != stEnded {
		t.Fatalf("SHARD_END: %v, want ended", got)
	}
	fence()
	if got := o.stateLocked(); got != stFenced {
		t.Fatalf("fenced: %v, want fenced", got)
	}
	o.setGone()
	if got := o.stateLocked(); got != stGone {
		t.Fatalf("gone: %v, want gone", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a reader opened on a gone lease did not panic in strict mode")
			}
		}()
		o.setSession(&session{wm: newWatermark(), cancel: func() {}})
	}()
}
