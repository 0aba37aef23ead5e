package shard_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// landedRelease lands every release at the store, then holds its answer
// until hold is closed: the taker can take and read the shard while the
// giver still waits for the release to return.
type landedRelease struct {
	*opStore
	hold chan struct{}
}

func (s *landedRelease) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	nl, err := s.opStore.Release(ctx, l)
	select {
	case <-s.hold:
	case <-ctx.Done():
	}
	return nl, err
}

// Reading lists the shards a coordinator reads now: a lease whose
// handoff has settled its records and written its release is read by
// its taker from then on, not by the giver, though the giver's release
// call has not returned yet. (Before, the giver listed it until the call
// returned: two instances said they read one shard.)
func TestReadingLeavesOutALeaseBeingReleased(t *testing.T) {
	e, _ := memEnv(t, 2)
	store := &landedRelease{opStore: newOpStore(e.store), hold: make(chan struct{})}
	defer close(store.hold)
	cfgA := e.config("a", newCollector().sink)
	cfgA.Leases = store
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
	b := e.start(patient(e, "b", newCollector()))
	eventually(t, 10*time.Second, "b reads a shard a handed over", func() bool { return len(b.Reading()) == 1 })
	given := b.Reading()[0]
	if reading := a.Reading(); slices.Contains(reading, given) {
		t.Errorf("a, whose release of %s landed and b took it, still says it reads it: a %v", given, reading)
	}
}
