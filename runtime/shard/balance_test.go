package shard

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

func leasesOf(owners ...string) []lease.Lease {
	out := make([]lease.Lease, len(owners))
	for i, o := range owners {
		id := fmt.Sprintf("shard-%d", i)
		out[i] = lease.Lease{Key: "ns/" + id, ShardID: id, Owner: o, Counter: 1}
	}
	return out
}

func TestPlanBalance(t *testing.T) {
	for _, tc := range []struct {
		name       string
		owners     []string
		held       []int // indexes me holds
		expired    []int
		finished   []int
		pendingFor map[int]string
		target     int
		take       []int
		spare      []int
		steal      int // index, -1 for none
	}{
		{name: "alone takes all", owners: []string{"", "", "", ""}, target: 4, take: []int{0, 1, 2, 3}, steal: -1},
		{name: "second instance steals one from the loaded", owners: []string{"a", "a", "a", "a"}, target: 2, steal: 0},
		{name: "balanced", owners: []string{"me", "me", "a", "a"}, held: []int{0, 1}, target: 2, steal: -1},
		{name: "expired leases are free", owners: []string{"a", "a", "b", "b"}, expired: []int{0, 1}, target: 2, take: []int{0, 1}, steal: -1},
		{name: "unowned before expired", owners: []string{"dead", "", "b", "b"}, expired: []int{0}, target: 2, take: []int{1, 0}, steal: -1},
		{name: "finished leases count for nobody", owners: []string{"", "", "a", "a"}, finished: []int{0}, target: 2, take: []int{1}, steal: -1},
		{name: "ceil rounding does not leave one idle", owners: []string{"a", "a", "b", "b"}, target: 2, steal: 0},
		{name: "steal from the one above its share", owners: []string{"a", "a", "a", "b", "b", "me"}, held: []int{5}, target: 2, steal: 0},
		{name: "no steal when the most loaded holds its share", owners: []string{"a", "a", "me"}, held: []int{2}, target: 2, steal: -1},
		{name: "left over by a previous run of this owner", owners: []string{"me", ""}, target: 2, take: []int{1, 0}, steal: -1},
		{name: "a lease released to its asker is left to it", owners: []string{"", "a", "me"}, pendingFor: map[int]string{0: "a"}, held: []int{2}, target: 2, steal: -1},
		{name: "a lease released to me is taken at once", owners: []string{"", "a", "a", "me"}, pendingFor: map[int]string{0: "me"}, held: []int{0, 3}, target: 2, take: []int{0}, steal: -1},
		{name: "two survivors of a dead owner: the rest are spares", owners: []string{"dead", "dead", "b", "me"}, expired: []int{0, 1}, held: []int{3}, target: 2, take: []int{0}, spare: []int{1}, steal: -1},
		{name: "leases being handed over count for their askers", owners: []string{"a", "a", "a", "a"}, pendingFor: map[int]string{0: "me", 1: "c"}, held: []int{0}, target: 2, steal: -1},
		{name: "a lease I hand over counts for its asker", owners: []string{"me", "me", "me", "b"}, pendingFor: map[int]string{0: "c"}, held: []int{0, 1, 2}, target: 2, steal: -1},
		{name: "unless the asker let it go stale", owners: []string{"", "a", "me"}, pendingFor: map[int]string{0: "a"}, expired: []int{0}, held: []int{2}, target: 2, take: []int{0}, steal: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := leasesOf(tc.owners...)
			for _, i := range tc.finished {
				ls[i].Checkpoint = lease.CheckpointShardEnd
			}
			for i, o := range tc.pendingFor {
				ls[i].PendingOwner = o
			}
			held := func(key string) bool {
				for _, i := range tc.held {
					if ls[i].Key == key {
						return true
					}
				}
				return false
			}
			expired := func(l lease.Lease) bool {
				for _, i := range tc.expired {
					if ls[i].Key == l.Key {
						return true
					}
				}
				return false
			}
			b := planBalance("me", ls, held, expired)
			if b.target != tc.target {
				t.Errorf("target = %d, want %d", b.target, tc.target)
			}
			var took []int
			for _, l := range b.take {
				took = append(took, slices.IndexFunc(ls, func(x lease.Lease) bool { return x.Key == l.Key }))
			}
			if !slices.Equal(took, tc.take) {
				t.Errorf("take = %v, want %v", took, tc.take)
			}
			var spare []int
			for _, l := range b.spare {
				spare = append(spare, slices.IndexFunc(ls, func(x lease.Lease) bool { return x.Key == l.Key }))
			}
			if !slices.Equal(spare, tc.spare) {
				t.Errorf("spare = %v, want %v", spare, tc.spare)
			}
			switch {
			case tc.steal < 0 && b.steal != nil:
				t.Errorf("steal %s, want none", b.steal.ShardID)
			case tc.steal >= 0 && (b.steal == nil || b.steal.Key != ls[tc.steal].Key):
				t.Errorf("steal = %v, want %s", b.steal, ls[tc.steal].ShardID)
			}
		})
	}
}

func TestObserverExpiresOnlyStillCounters(t *testing.T) {
	o := newObserver()
	t0 := time.Unix(1000, 0)
	l := lease.Lease{Key: "k", Owner: "a", Counter: 1}
	o.observe([]lease.Lease{l}, t0)
	if o.stale(l, t0.Add(9*time.Second), 10*time.Second) {
		t.Fatal("expired before the failover time")
	}
	l.Counter = 2 // renewed: the clock restarts at the local time it was seen
	o.observe([]lease.Lease{l}, t0.Add(9*time.Second))
	if o.stale(l, t0.Add(15*time.Second), 10*time.Second) {
		t.Fatal("a renewed lease expired")
	}
	if !o.stale(l, t0.Add(19*time.Second), 10*time.Second) {
		t.Fatal("a lease still for the failover time is not expired")
	}
	if o.stale(lease.Lease{Key: "k", Counter: 3}, t0.Add(time.Hour), time.Second) {
		t.Fatal("a lease whose counter moved since the last listing is stale")
	}
}
