package shard

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// The start gives each lease to one owner, and an owner the leases the
// plan of a fleet whose leases are all free (planBulk) makes it take: the
// instance that creates a lease is the one that takes it. A finished
// shard (SHARD_END, read by nobody) goes to one owner too. Every owner
// that sees the same members assigns alike, whichever leases exist yet.
func TestStartAssignGivesEachLeaseToTheOwnerThatTakesIt(t *testing.T) {
	for _, tc := range []struct{ shards, finished, owners int }{
		{16, 0, 4}, {64, 0, 20}, {10, 3, 3}, {3, 0, 5}, {1000, 0, 20}, {7, 7, 2},
	} {
		t.Run(fmt.Sprintf("%dx%d-%dfinished", tc.shards, tc.owners, tc.finished), func(t *testing.T) {
			var shards []types.Shard
			var missing, free []lease.Lease
			for i := range tc.shards {
				id := fmt.Sprintf("shardId-%012d", i)
				shards = append(shards, types.Shard{ShardId: aws.String(id)})
				l := lease.Lease{Key: "ns/" + id, ShardID: id}
				if i < tc.finished {
					l.Checkpoint = lease.CheckpointShardEnd
				}
				missing = append(missing, l)
				free = append(free, l)
			}
			lin, err := NewLineage(shards)
			if err != nil {
				t.Fatal(err)
			}
			var owners []string
			for i := range tc.owners {
				owners = append(owners, fmt.Sprintf("i%02d", i))
			}
			assign, active := startAssign(lin, map[string]lease.Lease{}, missing, owners)
			if len(assign) != tc.shards || len(active) != tc.shards-tc.finished {
				t.Fatalf("%d shards assigned, %d active; want %d and %d", len(assign), len(active), tc.shards, tc.shards-tc.finished)
			}
			// Half the leases created, some of them taken: the same.
			byShard := map[string]lease.Lease{}
			for i, l := range free[:tc.shards/2] {
				if i%3 == 0 {
					l.Owner = assign[l.ShardID]
				}
				byShard[l.ShardID] = l
			}
			again, _ := startAssign(lin, byShard, missing[tc.shards/2:], owners)
			for id, o := range assign {
				if again[id] != o {
					t.Errorf("%s given to %s with no lease created, to %s with half of them", id, o, again[id])
				}
			}
			never := func(string) bool { return false }
			for _, me := range owners {
				p := planBulk(me, free, owners, never, func(lease.Lease) bool { return false }, nil)
				var want, got []string
				for _, l := range p.take {
					want = append(want, l.ShardID)
				}
				for _, id := range active {
					if assign[id] == me {
						got = append(got, id)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: the start gives it %v, its plan takes %v", me, got, want)
				}
				// Only its own created: it plans with the others'
				// reserved for them, takes its own and asks for nothing.
				var mine []lease.Lease
				for _, l := range free {
					if assign[l.ShardID] == me {
						mine = append(mine, l)
					}
				}
				p = planBulk(me, reserved("ns", mine, reserveOf(assign, active)), owners, never, func(lease.Lease) bool { return false }, nil)
				got = got[:0]
				for _, l := range p.take {
					got = append(got, l.ShardID)
				}
				if !slices.Equal(got, want) || len(p.steals) != 0 {
					t.Errorf("%s: with the others' leases not created yet, it takes %v and asks for %d; want %v and none", me, got, len(p.steals), want)
				}
			}
		})
	}
}

func reserveOf(assign map[string]string, active []string) map[string]string {
	out := map[string]string{}
	for _, id := range active {
		out[id] = assign[id]
	}
	return out
}

// The start gives leases only to this owner and the live members that are
// starting too: whose entry says so, or that took a lease since. An entry
// that says neither (a dead instance's looks alive to readMembers until
// the failover time) gets none, nor does a member judged dead.
func TestStartOwnersAreTheStartingMembers(t *testing.T) {
	v := memberView{all: map[string]lease.Member{}, live: map[string]bool{}}
	for _, m := range []struct {
		owner          string
		starting, live bool
	}{{"me", true, true}, {"b", true, true}, {"a", true, true}, {"c", false, true}, {"still", false, true}, {"gone", true, false}} {
		v.all[m.owner] = lease.Member{Owner: m.owner, Beat: 1, Starting: m.starting}
		v.live[m.owner] = m.live
	}
	byShard := map[string]lease.Lease{
		"s1": {ShardID: "s1", Owner: "c"},                                           // c's first pass is over: it took s1
		"s2": {ShardID: "s2", Owner: "still", Checkpoint: lease.CheckpointShardEnd}, // finished, read by nobody
		"s3": {ShardID: "s3"},
	}
	if got, want := startOwners("me", v, byShard), []string{"a", "b", "c", "me"}; !slices.Equal(got, want) {
		t.Fatalf("startOwners = %v, want %v", got, want)
	}
}
