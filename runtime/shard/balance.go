package shard

import (
	"sort"
	"sync"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// observer remembers, per lease, the local time its counter last moved. A
// lease whose counter has stood still for the failover time is expired: its
// owner stopped renewing. Only local clocks are compared, as the KCL does,
// so hosts need no synchronised time. A pass observes; the renewal loop
// also asks (followHandoffs), hence the lock.
type observer struct {
	mu   sync.Mutex
	seen map[string]observation
	// linger keeps what was seen of a key gone from a listing for that
	// long after it was last seen: a member entry removed as dead
	// (dropDeadMembers) that its owner writes again unchanged (its
	// heartbeats land but go unconfirmed) is not taken for a new, live
	// one, however long ago its beat was first seen.
	linger time.Duration
	// rejoin, when set, starts a key's first-seen time anew when its
	// counter moves after standing still that long: a member entry that
	// looked dead and beats again may be a new instance under the same
	// owner id, which has seen the others' entries only since.
	rejoin time.Duration
}

type observation struct {
	counter int64
	owner   string
	at      time.Time // when counter and owner were first seen
	last    time.Time // when the key was last listed
	first   time.Time // when the key was first seen, whatever its counter (see rejoin)
}

func newObserver() *observer { return &observer{seen: make(map[string]observation)} }

// observe records the leases of one listing and forgets leases that are gone.
func (o *observer) observe(leases []lease.Lease, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := make(map[string]observation, len(leases))
	for _, l := range leases {
		keep[l.Key] = o.next(l, now)
	}
	if o.linger > 0 {
		for k, ob := range o.seen {
			if _, ok := keep[k]; !ok && now.Sub(ob.last) < o.linger {
				keep[k] = ob
			}
		}
	}
	o.seen = keep
}

// next is what o knows of l once it is listed at now (under mu).
func (o *observer) next(l lease.Lease, now time.Time) observation {
	ob, ok := o.seen[l.Key]
	if ok && ob.counter == l.Counter && ob.owner == l.Owner {
		ob.last = now
		return ob
	}
	first := ob.first
	if !ok || (o.rejoin > 0 && now.Sub(ob.at) >= o.rejoin) {
		first = now
	}
	return observation{counter: l.Counter, owner: l.Owner, at: now, last: now, first: first}
}

// firstSeen returns when key was first seen (ok false: it was not).
func (o *observer) firstSeen(key string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[key]
	return ob.first, ok
}

// observeSome records the leases of a partial listing (the watched member
// entries of a roster read) and forgets nothing.
func (o *observer) observeSome(leases []lease.Lease, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range leases {
		o.seen[l.Key] = o.next(l, now)
	}
}

// stale reports whether nobody has written l for failover: its owner (or the
// owner a handoff reserved it for) stopped working on it.
func (o *observer) stale(l lease.Lease, now time.Time, failover time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[l.Key]
	return ok && ob.counter == l.Counter && now.Sub(ob.at) >= failover
}

// staleAt returns when l, as listed, will have stood still for failover
// (ok false: not seen with that counter and owner).
func (o *observer) staleAt(l lease.Lease, failover time.Duration) (at time.Time, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[l.Key]
	if !ok || ob.counter != l.Counter || ob.owner != l.Owner {
		return time.Time{}, false
	}
	return ob.at.Add(failover), true
}

// seenSince reports whether l, as listed, was first seen (its counter and
// owner) after t, or not seen at all: it may have been written after t.
func (o *observer) seenSince(l lease.Lease, t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[l.Key]
	return !ok || ob.counter != l.Counter || ob.owner != l.Owner || ob.at.After(t)
}

// balance is one pass's decision.
type balance struct {
	target int           // fair share: ceil(active leases / live owners)
	take   []lease.Lease // unowned or expired leases to take now
	// spare are the free leases after take, in the same order: when another
	// instance wins the race for one of take (two survivors of a dead owner
	// walk the same list), the next spare is tried in the same pass instead
	// of one lease interval later.
	spare []lease.Lease
	steal *lease.Lease // a live owner's lease to ask for (at most one per pass)
	// steals are the live owners' leases to ask for (planBulk).
	steals []lease.Lease
}

// planBalance decides which leases me takes. leases is the store's listing;
// held says whether me holds (or is already being handed) a lease; stale
// whether a lease has not been written for the failover time. Finished
// leases (SHARD_END) need no reader and count for nobody. A lease released
// in a handoff is left to the owner that asked for it (that owner takes it
// at its next pass), unless it has not done so within the failover time.
func planBalance(me string, leases []lease.Lease, held func(key string) bool, stale func(lease.Lease) bool) balance {
	var b balance
	// Sized once: a lease is a few hundred bytes, and growing by appends
	// copied about twice the listing per pass (4.7 MB at 4,000 leases).
	active := make([]lease.Lease, 0, len(leases))
	for _, l := range leases {
		if l.Checkpoint != lease.CheckpointShardEnd {
			active = append(active, l)
		}
	}
	load := map[string]int{me: 0}
	foreign := map[string]bool{} // owners that never answer a handoff (KCL workers)
	mine := 0
	var free []lease.Lease
	for _, l := range active {
		switch {
		case l.Owner == "" && l.PendingOwner == me:
			// Released to me after I asked: mine, whatever the share says
			// now (followHandoffs would take it on its next tick anyway).
			b.take = append(b.take, l)
			mine++
		case held(l.Key) && (l.PendingOwner == "" || l.PendingOwner == me || l.Owner != me):
			mine++
		case l.PendingOwner != "" && l.PendingOwner != me && !stale(l):
			// Asked for by another owner: being handed over, or released
			// and reserved for it. It counts for that owner already, or
			// every instance that asked would see the owner still loaded
			// and ask it for one more while the first handoff settles.
			load[l.PendingOwner]++
		case l.Owner == "" || l.Owner == me || stale(l):
			// Owner == me without a local hold: a previous run of this
			// owner id left it behind; take it back like an unowned one.
			free = append(free, l)
		default:
			load[l.Owner]++
			if l.ForeignOwner {
				foreign[l.Owner] = true
			}
		}
	}
	if len(active) == 0 {
		return b
	}
	b.target = (len(active) + len(load) - 1) / len(load)
	// Unowned before expired, then by shard id, so parents (older ids) come
	// before their children and two instances walk the list alike.
	sort.SliceStable(free, func(i, j int) bool {
		if (free[i].Owner == "") != (free[j].Owner == "") {
			return free[i].Owner == ""
		}
		return free[i].ShardID < free[j].ShardID
	})
	for i, l := range free {
		if mine >= b.target {
			b.spare = free[i:]
			return b
		}
		b.take = append(b.take, l)
		mine++
	}
	if mine >= b.target {
		return b
	}
	// Steal from the most loaded live owner when it has more than its share,
	// or exactly its share while we lag by two or more (ceil rounding would
	// otherwise leave us idle: 4 shards, 3 owners holding 2, 2, 0). A
	// foreign owner (a KCL worker) is never asked: it would not answer, and
	// its leases are taken only when they expire, as the KCL takes them.
	var victim string
	most := 0
	for owner, n := range load {
		if owner != me && !foreign[owner] && (n > most || (n == most && owner < victim)) {
			victim, most = owner, n
		}
	}
	if victim == "" || !(most > b.target || (most == b.target && mine < b.target-1)) {
		return b
	}
	for _, l := range active {
		if l.Owner == victim && l.PendingOwner == "" && !held(l.Key) {
			b.steal = &l
			break
		}
	}
	return b
}

// shares is planBulk's fair share of each owner of load, for active leases:
// floor(active / owners) each, and one more for the active % owners most
// loaded (ties by id), so an owner keeps what it has wherever the rounding
// allows.
func shares(load map[string]int, active int) map[string]int {
	owners := make([]string, 0, len(load))
	for o := range load {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool {
		if load[owners[i]] != load[owners[j]] {
			return load[owners[i]] > load[owners[j]]
		}
		return owners[i] < owners[j]
	})
	target := make(map[string]int, len(owners))
	if len(owners) == 0 {
		return target
	}
	base, extra := active/len(owners), active%len(owners)
	for i, o := range owners {
		target[o] = base
		if i < extra {
			target[o]++
		}
	}
	return target
}

// planBulk decides, like planBalance, which leases me takes now, and asks
// in one pass for every lease the fair-share rule gives it from owners above
// their share (steals), so a joining instance reaches its share in one round
// of graceful handoffs instead of one lease per pass.
//
// Every instance applies the same deterministic rule to the same view, so
// their plans agree without talking to each other (and without a leader):
//
//  1. The live owners are the owners of unexpired leases, me, and members
//     (other owners known alive although they hold nothing: a joiner).
//  2. Each gets floor(active / owners) leases, and the active % owners
//     most loaded owners (ties by id) one more, so an owner keeps what it
//     has wherever the rounding allows and nothing moves back and forth.
//  3. Free leases (unowned, expired) go to the owners below their target,
//     in owner-id order, unowned before expired, then by shard id; an
//     expired lease only to an owner that can judge its owner stopped
//     (canTake), and one that no owner below its target can, to the least
//     loaded owner that can (ties by id): this owner at least.
//  4. What those still lack comes from the owners above their target, in
//     owner-id order, each giving its surplus from its first leases in
//     shard order, again to the owners below in owner-id order.
//
// Every lease that moves moves once, from an owner above its target to one
// below, so the ownership changes are exactly the minimum: the sum of the
// surpluses (plus the free leases). A lease asked for counts for its asker
// from then on, so a later pass does not ask for more while handoffs
// settle. Views may differ for a pass (a member one instance saw first);
// the conditional writes make the worst case a request that fails or waits,
// never a lease handed to two owners.
//
// A single assigner (the namespace's leader lock) would see the same view
// and write the same moves; the rule needs no election, no failover of the
// assigner and no extra writes, and each instance asks only for its own
// leases, so the handoffs run in parallel across the fleet.
//
// canTake says whether owner o can take free lease l yet (nil: any can;
// this owner always can: l is free in its own view).
func planBulk(me string, leases []lease.Lease, members []string, held func(key string) bool, stale func(lease.Lease) bool, canTake func(o string, l lease.Lease) bool) balance {
	var b balance
	load := map[string]int{me: 0}
	for _, m := range members {
		load[m] += 0
	}
	mine := 0
	var free []lease.Lease
	owned := map[string][]lease.Lease{} // leases an owner could be asked for
	active := 0
	for _, l := range leases {
		if l.Checkpoint == lease.CheckpointShardEnd {
			continue
		}
		active++
		switch {
		case l.Owner == "" && l.PendingOwner == me:
			b.take = append(b.take, l)
			mine++
		case held(l.Key) && (l.PendingOwner == "" || l.PendingOwner == me || l.Owner != me):
			mine++
		case l.PendingOwner != "" && l.PendingOwner != me && !stale(l):
			load[l.PendingOwner]++
		case l.Owner == "" || l.Owner == me || stale(l):
			free = append(free, l)
		default:
			load[l.Owner]++
			// A foreign owner (a KCL worker) counts for the shares but is
			// never asked: it would not answer, and its leases are taken
			// only when they expire, as the KCL takes them.
			if l.PendingOwner == "" && !l.ForeignOwner {
				owned[l.Owner] = append(owned[l.Owner], l)
			}
		}
	}
	if active == 0 {
		return b
	}
	load[me] = mine
	target := shares(load, active)
	b.target = target[me]
	owners := make([]string, 0, len(load))
	for o := range load {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	sort.SliceStable(free, func(i, j int) bool {
		if (free[i].Owner == "") != (free[j].Owner == "") {
			return free[i].Owner == ""
		}
		return free[i].ShardID < free[j].ShardID
	})
	// Free leases first, then the surpluses, to the owners below target.
	var pool []lease.Lease
	for _, o := range owners {
		if n := load[o] - target[o]; n > 0 {
			ls := owned[o]
			sort.Slice(ls, func(i, j int) bool { return ls[i].ShardID < ls[j].ShardID })
			pool = append(pool, ls[:min(n, len(ls))]...)
		}
	}
	can := func(o string, l lease.Lease) bool { return o == me || canTake == nil || canTake(o, l) }
	given := make([]bool, len(free)) // free leases handed out so far
	nf := 0                          // the first free lease not handed out
	np := 0                          // pool leases handed out so far
	for _, o := range owners {
		for nf < len(free) && given[nf] {
			nf++
		}
		need := target[o] - load[o]
		for i := nf; need > 0 && i < len(free); i++ {
			if given[i] || !can(o, free[i]) {
				continue
			}
			if o == me {
				b.take = append(b.take, free[i])
			}
			given[i] = true
			load[o]++
			need--
		}
		for ; need > 0 && np < len(pool); need-- {
			if o == me {
				b.steals = append(b.steals, pool[np])
			}
			np++
		}
	}
	// A dead owner's lease that no owner below its target can take yet
	// (each joined after the owner's last beat: issue 29, dst mix churn
	// seed 1796567417450576642) goes to the least loaded owner that can,
	// above its target if need be: read now, it is moved on by a later
	// pass's balancing, rather than read by nobody until the joiners can
	// judge the owner dead a failover time after they joined. load counts
	// the free leases handed out, not the steals: a planner never pools
	// its own surplus, and every planner must pick the same taker.
	for i, l := range free {
		if given[i] {
			continue
		}
		taker := ""
		for _, o := range owners {
			if can(o, l) && (taker == "" || load[o] < load[taker]) {
				taker = o
			}
		}
		if taker == me {
			b.take = append(b.take, l)
		}
		load[taker]++
	}
	// The free leases others are meant to take, for when one of mine is
	// taken first (a view one pass behind): tried in order while I lack.
	taking := make(map[string]bool, len(b.take))
	for _, l := range b.take {
		taking[l.Key] = true
	}
	for _, l := range free {
		if !taking[l.Key] {
			b.spare = append(b.spare, l)
		}
	}
	return b
}

// takeOverdue moves into plan.take the spare leases (free, planned for
// other members to take) that have stayed free, as listed, for grace since
// a pass first planned them so, and returns the times to keep for the next
// pass. The fair-share plan leaves a free lease to the member below its
// share; one that beats but never takes it (a joiner that cannot yet judge
// the old owner dead, one whose takes fail, an asker gone quiet) would
// leave it unread for as long as it beats (issue 29, dst mix churn seed
// 1796553474032713470: 11.1 s at a 3 s failover). Past grace any member
// takes it; a later pass's balancing moves it on.
func takeOverdue(plan *balance, since map[string]observation, now time.Time, grace time.Duration) map[string]observation {
	next := make(map[string]observation, len(plan.spare))
	var spare []lease.Lease
	for _, l := range plan.spare {
		ob, ok := since[l.Key]
		if !ok || ob.counter != l.Counter || ob.owner != l.Owner {
			ob = observation{counter: l.Counter, owner: l.Owner, at: now}
		}
		next[l.Key] = ob
		if now.Sub(ob.at) >= grace {
			plan.take = append(plan.take, l)
			continue
		}
		spare = append(spare, l)
	}
	plan.spare = spare
	return next
}
