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
		foreign    []int // indexes owned by a KCL worker
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
		{name: "a KCL worker is never asked for a lease", owners: []string{"kcl", "kcl", "kcl", "kcl"}, foreign: []int{0, 1, 2, 3}, target: 2, steal: -1},
		{name: "a KCL worker counts for the share; a peer is asked instead", owners: []string{"kcl", "kcl", "kcl", "kcl", "a", "a", "a"}, foreign: []int{0, 1, 2, 3}, target: 3, steal: 4},
		{name: "a KCL worker's expired lease is free", owners: []string{"kcl", "kcl"}, foreign: []int{0, 1}, expired: []int{1}, target: 1, take: []int{1}, steal: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := leasesOf(tc.owners...)
			for _, i := range tc.finished {
				ls[i].Checkpoint = lease.CheckpointShardEnd
			}
			for i, o := range tc.pendingFor {
				ls[i].PendingOwner = o
			}
			for _, i := range tc.foreign {
				ls[i].ForeignOwner = true
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

// Every instance applies planBulk to the same view: their takes and
// requests never name one lease twice, every lease that moves moves once
// (the minimum number of changes), and afterwards every owner holds its
// fair share, within one lease of every other.
func TestPlanBulkAgreesAcrossInstances(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shards  int
		holders map[string]int // owner -> leases it holds, in shard order
		joiners []string       // live members holding nothing
		dead    []string       // owners whose leases are expired
		free    int            // unowned leases (the last ones)
	}{
		{name: "one joins one, 64 shards", shards: 64, holders: map[string]int{"a": 64}, joiners: []string{"b"}},
		{name: "one joins one, 256 shards", shards: 256, holders: map[string]int{"a": 256}, joiners: []string{"b"}},
		{name: "one joins three, 1000 shards", shards: 1000, holders: map[string]int{"a": 334, "b": 333, "c": 333}, joiners: []string{"d"}},
		{name: "three join two at once", shards: 256, holders: map[string]int{"a": 128, "b": 128}, joiners: []string{"c", "d", "e"}},
		{name: "ten join ten, 1000 shards", shards: 1000, holders: map[string]int{"a": 100, "b": 100, "c": 100, "d": 100, "e": 100, "f": 100, "g": 100, "h": 100, "i": 100, "j": 100}, joiners: []string{"k", "l", "m", "n", "o", "p", "q", "r", "s", "t"}},
		{name: "start: all unowned", shards: 1000, joiners: []string{"a", "b", "c"}, free: 1000},
		{name: "a dead owner's leases spread", shards: 256, holders: map[string]int{"a": 86, "b": 85, "c": 85}, dead: []string{"a"}},
		{name: "a dead owner and a joiner", shards: 100, holders: map[string]int{"a": 50, "b": 50}, dead: []string{"a"}, joiners: []string{"c"}},
		{name: "leaver's released leases", shards: 100, holders: map[string]int{"a": 34, "b": 33}, free: 33},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var owners []string
			for o := range tc.holders {
				owners = append(owners, o)
			}
			slices.Sort(owners)
			ls := make([]lease.Lease, tc.shards)
			i := 0
			for _, o := range owners {
				for range tc.holders[o] {
					ls[i].Owner = o
					i++
				}
			}
			for j := range ls {
				id := fmt.Sprintf("shardId-%012d", j)
				ls[j].Key, ls[j].ShardID, ls[j].Counter = "ns/"+id, id, 1
			}
			dead := map[string]bool{}
			for _, d := range tc.dead {
				dead[d] = true
			}
			var live []string
			for _, o := range append(owners, tc.joiners...) {
				if !dead[o] {
					live = append(live, o)
				}
			}
			stale := func(l lease.Lease) bool { return dead[l.Owner] }
			load := map[string]int{}
			for _, l := range ls {
				if l.Owner != "" && !dead[l.Owner] {
					load[l.Owner]++
				}
			}
			claimed := map[string]string{}
			moves := 0
			for _, me := range live {
				held := func(key string) bool {
					for _, l := range ls {
						if l.Key == key {
							return l.Owner == me
						}
					}
					return false
				}
				p := planBulk(me, ls, live, held, stale, nil)
				for _, l := range append(p.take, p.steals...) {
					if by, ok := claimed[l.Key]; ok {
						t.Fatalf("%s and %s both claim %s", by, me, l.ShardID)
					}
					claimed[l.Key] = me
					if l.Owner != "" && !dead[l.Owner] {
						load[l.Owner]--
					}
					load[me]++
					moves++
				}
			}
			lo, hi := tc.shards, 0
			for _, o := range live {
				lo, hi = min(lo, load[o]), max(hi, load[o])
			}
			if hi-lo > 1 {
				t.Errorf("after one round the loads range from %d to %d: %v", lo, hi, load)
			}
			// The minimum: every free or expired lease moves, and every
			// owner above the fair share's ceiling gives its surplus.
			minMoves := 0
			share := tc.shards / len(live)
			extra := tc.shards % len(live)
			byLoad := slices.Clone(live)
			before := map[string]int{}
			for _, l := range ls {
				switch {
				case l.Owner == "" || dead[l.Owner]:
					minMoves++
				default:
					before[l.Owner]++
				}
			}
			slices.SortFunc(byLoad, func(a, b string) int { return before[b] - before[a] })
			for i, o := range byLoad {
				want := share
				if i < extra {
					want++
				}
				if before[o] > want {
					minMoves += before[o] - want
				}
			}
			if moves != minMoves {
				t.Errorf("%d ownership changes; the minimum is %d", moves, minMoves)
			}
			t.Logf("%d live owners, %d changes, loads %d..%d", len(live), moves, lo, hi)
		})
	}
}

// A second round on the view after the first changes nothing: the fleet
// does not oscillate.
func TestPlanBulkIsStable(t *testing.T) {
	owners := []string{"a", "b", "c"}
	ls := leasesOf(slices.Repeat([]string{"a", "b", "c"}, 33)...)
	ls = append(ls, leasesOf("a")[0])
	ls[len(ls)-1].Key, ls[len(ls)-1].ShardID = "ns/shard-x", "shard-x"
	for _, me := range owners {
		p := planBulk(me, ls, owners, func(key string) bool {
			for _, l := range ls {
				if l.Key == key {
					return l.Owner == me
				}
			}
			return false
		}, func(lease.Lease) bool { return false }, nil)
		if len(p.take) != 0 || len(p.steals) != 0 {
			t.Errorf("%s on a balanced fleet takes %d and asks for %d", me, len(p.take), len(p.steals))
		}
	}
}

// Bulk balancing never asks a KCL worker (a foreign owner) for a lease: it
// would not answer. Its leases count for the shares, and a kinesisgen peer
// above its share is asked instead.
func TestPlanBulkNeverAsksAKCLWorker(t *testing.T) {
	ls := leasesOf("kcl", "kcl", "kcl", "kcl", "kcl", "a", "a", "a", "a")
	for i := range 5 {
		ls[i].ForeignOwner = true
	}
	p := planBulk("me", ls, []string{"a", "me"}, func(string) bool { return false }, func(lease.Lease) bool { return false }, nil)
	if len(p.steals) != 1 {
		t.Fatalf("asked for %d leases, want the one of peer a above its share", len(p.steals))
	}
	for _, s := range p.steals {
		if s.ForeignOwner || s.Owner != "a" {
			t.Errorf("asked %s for %s, want only peer a", s.Owner, s.ShardID)
		}
	}
}

// BenchmarkPlanPass plans one lease pass of an instance holding its share
// of n leases among 20 owners: planBulk with the map of held keys the pass
// builds (heldKeys), beside planBalance with a scan of the held leases per
// listed lease, as the pass did before issue 17 (held x listed). Run:
//
//	go test -run '^$' -bench PlanPass -benchtime 200x ./runtime/shard
func BenchmarkPlanPass(b *testing.B) {
	for _, n := range []int{250, 1000, 2000, 4000} {
		owners := make([]string, 20)
		for i := range owners {
			owners[i] = fmt.Sprintf("owner-%02d", i)
		}
		ls := make([]lease.Lease, n)
		var mine []string
		for i := range ls {
			id := fmt.Sprintf("shardId-%012d", i)
			ls[i] = lease.Lease{Key: "ns/" + id, ShardID: id, Owner: owners[i%20], Counter: 1}
			if ls[i].Owner == owners[0] {
				mine = append(mine, ls[i].Key)
			}
		}
		stale := func(lease.Lease) bool { return false }
		b.Run(fmt.Sprintf("bulk-map/%d", n), func(b *testing.B) {
			for b.Loop() {
				set := make(map[string]bool, len(mine))
				for _, k := range mine {
					set[k] = true
				}
				planBulk(owners[0], ls, owners, func(k string) bool { return set[k] }, stale, nil)
			}
		})
		b.Run(fmt.Sprintf("one-steal-scan/%d", n), func(b *testing.B) {
			for b.Loop() {
				planBalance(owners[0], ls, func(k string) bool { return slices.Contains(mine, k) }, stale)
			}
		})
	}
}

// A member entry removed as dead whose owner writes it again unchanged
// (its heartbeats land but go unconfirmed) stays dead however long after
// the beat was first seen it comes back, as long as it is gone for less
// than the linger time (mix late, seed 61 of the simulator: a2's entry,
// late for 13 s, came back unchanged 12 s after its beat was first seen,
// looked live for a failover time, and the survivor, at its share with a2
// counted, left a dead owner's shards unread for 9.4 s).
func TestObserverKeepsARemovedBeatWhileItComesBack(t *testing.T) {
	o := &observer{seen: map[string]observation{}, linger: 9 * time.Second}
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	beat := lease.Lease{Key: "a2", Owner: "a2", Counter: 5}
	other := lease.Lease{Key: "a0", Owner: "a0", Counter: 1}
	o.observe([]lease.Lease{other, beat}, at(0))
	for s := 1.0; s <= 8; s++ { // written again unchanged, removed, written again ...
		o.observe([]lease.Lease{other, beat}, at(s))
	}
	o.observe([]lease.Lease{other}, at(9.5)) // removed as dead when this read was sent
	o.observe([]lease.Lease{other, beat}, at(12))
	if !o.stale(beat, at(12), 3*time.Second) {
		t.Fatal("a beat unchanged for 12 s, last seen 3.5 s before it came back, judged live again")
	}
	// Gone for longer than the linger time, it is forgotten: a new member
	// of that name (a restart writes a new beat anyway) starts afresh.
	o.observe([]lease.Lease{other}, at(30))
	o.observe([]lease.Lease{other, beat}, at(31))
	if o.stale(beat, at(31), 3*time.Second) {
		t.Fatal("a beat gone for longer than the linger time still remembered")
	}
}

// A member's first-seen time stays while its beat moves, and starts anew
// when it beats again after standing still for the rejoin time (a new
// instance under the same owner id has seen the others only since).
func TestObserverFirstSeen(t *testing.T) {
	o := &observer{seen: map[string]observation{}, rejoin: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	b := func(n int64) lease.Lease { return lease.Lease{Key: "a1", Owner: "a1", Counter: n} }
	o.observe([]lease.Lease{b(1)}, at(0))
	o.observe([]lease.Lease{b(2)}, at(1))
	o.observe([]lease.Lease{b(3)}, at(3.5)) // stood still 2.5 s: the same instance
	if f, ok := o.firstSeen("a1"); !ok || !f.Equal(at(0)) {
		t.Errorf("first seen of a beating member = %v, %v; want %v", f, ok, at(0))
	}
	o.observe([]lease.Lease{b(4)}, at(7)) // stood still 3.5 s: dead, and back
	if f, _ := o.firstSeen("a1"); !f.Equal(at(7)) {
		t.Errorf("first seen of a member back after looking dead = %v; want %v", f, at(7))
	}
	if _, ok := o.firstSeen("a9"); ok {
		t.Error("a member never seen has a first-seen time")
	}
}

// A pass at its share lists at once when a dead member's lease would be
// left to joiners only (planBulk gives it to a member that can judge the
// owner dead: maybe this one), not when an older member below its share
// takes it, nor for a lease released to a joiner.
func TestDeadLeftToJoiners(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const failover = 3 * time.Second
	known := map[string]lease.Lease{
		"s1": {ShardID: "s1", Owner: "me"}, "s2": {ShardID: "s2", Owner: "d"},
	}
	released := map[string]lease.Lease{
		"s1": {ShardID: "s1", Owner: "me"}, "s2": {ShardID: "s2", PendingOwner: "j"},
	}
	view := func(joined time.Duration) memberView {
		return memberView{
			all:   map[string]lease.Member{"me": {Held: 1}, "j": {}, "d": {Held: 1}},
			live:  map[string]bool{"me": true, "j": true},
			first: map[string]time.Time{"j": t0.Add(-joined)},
		}
	}
	for _, tc := range []struct {
		name  string
		view  memberView
		known map[string]lease.Lease
		want  bool
	}{
		{"left to a joiner", view(time.Second), known, true},
		{"left to a member that can judge", view(failover), known, false},
		{"released to a joiner", view(time.Second), released, false},
	} {
		if got := deadLeftToJoiners("me", 1, tc.view, tc.known, t0, failover); got != tc.want {
			t.Errorf("%s: deadLeftToJoiners = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The members that can judge a dead owner's leases agree on one taker for
// each, whoever of them plans, when joiners below their share cannot
// (canTake): every lease is taken once, none by a joiner.
func TestPlanBulkGivesEachDeadLeaseToOneJudge(t *testing.T) {
	owners := []string{"a", "b", "c", "j", "k"}
	for _, layout := range [][]string{
		{"d", "d", "d", "a", "a", "b", "c", "c"},
		{"d", "d", "a", "a", "a", "b", "b", "c", "", "d"},
		{"d", "a", "b", "c"},
		{"d", "d", "d", "d", "d", "d", "a"},
	} {
		ls := leasesOf(layout...)
		stale := func(l lease.Lease) bool { return l.Owner == "d" }
		canTake := func(o string, l lease.Lease) bool { return l.Owner != "d" || (o != "j" && o != "k") }
		takers := map[string][]string{}
		for _, me := range []string{"a", "b", "c"} {
			p := planBulk(me, ls, owners, func(key string) bool {
				for _, l := range ls {
					if l.Key == key {
						return l.Owner == me
					}
				}
				return false
			}, stale, canTake)
			for _, l := range p.take {
				takers[l.ShardID] = append(takers[l.ShardID], me)
			}
		}
		for _, l := range ls {
			if l.Owner == "d" && len(takers[l.ShardID]) != 1 {
				t.Errorf("%v: dead member's %s taken by %v, want exactly one of a, b, c", layout, l.ShardID, takers[l.ShardID])
			}
		}
	}
}
