package shard

import (
	"context"
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

func TestLeaseStateMoves(t *testing.T) {
	for _, tc := range []struct {
		from, to leaseState
		ok       bool
	}{
		{stWaiting, stReading, true},
		{stReading, stSettling, true},
		{stSettling, stReading, true},    // postponed
		{stSettling, stReleasing, false}, // the final checkpoint comes first
		{stCheckpointing, stReleasing, true},
		{stCheckpointing, stReading, false}, // past the drain, a handoff releases or keeps
		{stReleasing, stGone, true},         // released
		{stReleasing, stWaiting, true},      // kept
		{stEnded, stGone, true},
		{stEnded, stReading, false}, // a Seek's reader leaves it ended
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

// newTestOwned is a held lease with a fence context and no store.
func newTestOwned(t *testing.T, l lease.Lease) (*owned, context.CancelFunc) {
	fctx, fence := context.WithCancel(context.Background())
	t.Cleanup(fence)
	o := &owned{shard: "s", fctx: fctx, st: &Stats{}, l: l}
	o.taken()
	return o, fence
}

func testSession() *session { return &session{wm: newWatermark(), cancel: func() {}} }

func TestLeaseStateTransitions(t *testing.T) {
	o, _ := newTestOwned(t, lease.Lease{})
	want := func(st leaseState) {
		t.Helper()
		if got := o.stateNow(); got != st {
			t.Fatalf("state %v, want %v", got, st)
		}
	}
	want(stWaiting)
	if !o.read(testSession()) {
		t.Fatal("read refused on a waiting lease")
	}
	want(stReading)
	o.unread()
	want(stWaiting)
	o.read(testSession())
	if !o.hand() {
		t.Fatal("hand refused on a reading lease")
	}
	want(stSettling)
	if o.hand() || o.read(testSession()) {
		t.Fatal("a lease being handed over was handed or read again")
	}
	o.handBack("postponed")
	want(stReading) // its reader generation is still set
	o.hand()
	o.handStep(stCheckpointing)
	o.handStep(stReleasing)
	want(stReleasing)
	o.unread()
	o.handBack("kept")
	want(stWaiting)
	o.l.Checkpoint = lease.CheckpointShardEnd
	o.end()
	want(stEnded)
	if !o.read(testSession()) { // a Seek's reader on an ended lease
		t.Fatal("read refused on an ended lease")
	}
	want(stEnded)
	o.hand()
	o.handBack("postponed")
	want(stEnded)
	o.hand()
	o.end() // a SHARD_END landing during a handoff leaves the handoff alone
	want(stSettling)
	if !o.fence() {
		t.Fatal("fence refused on a held lease")
	}
	want(stFenced)
	o.handStep(stCheckpointing) // the fence came first: no move, no complaint
	o.end()
	want(stFenced)
	o.drop("forgotten")
	want(stGone)
	if o.fence() {
		t.Fatal("a gone lease was fenced")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a move out of gone did not panic in strict mode")
			}
		}()
		o.handStep(stCheckpointing)
	}()
}

// A lease taken with SHARD_END is ended from the start: the next pass
// releases it.
func TestLeaseTakenEnded(t *testing.T) {
	o, _ := newTestOwned(t, lease.Lease{Checkpoint: lease.CheckpointShardEnd})
	if got := o.stateNow(); got != stEnded {
		t.Fatalf("state %v, want ended", got)
	}
}

func TestPublicState(t *testing.T) {
	for _, tc := range []struct {
		st    leaseState
		asked bool
		want  LeaseState
		step  HandoffStep
	}{
		{stWaiting, false, LeaseWaiting, ""},
		{stReading, false, LeaseReading, ""},
		{stReading, true, LeaseReading, HandoffAsked},
		{stSettling, true, LeaseHandingOver, HandoffSettling},
		{stCheckpointing, true, LeaseHandingOver, HandoffCheckpointing},
		{stReleasing, true, LeaseHandingOver, HandoffReleasing},
		{stEnded, false, LeaseEnded, ""},
	} {
		got, step := publicState(tc.st, tc.asked)
		if got != tc.want || step != tc.step {
			t.Errorf("publicState(%v, asked %v) = %v, %q; want %v, %q", tc.st, tc.asked, got, step, tc.want, tc.step)
		}
	}
}
