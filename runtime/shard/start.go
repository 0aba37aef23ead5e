package shard

import (
	"context"
	"hash/fnv"
	"slices"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// A fleet's start (LivenessPerInstance, BalanceBulk). Instances that start
// together on a stream without leases used to create every lease each, all
// but one of each create refused: at 1,000 shards and 20 instances up to
// 19,000 conditional writes, each billed a write unit, for 1,000 leases.
// Now a first pass that finds every lease free (startSettles) creates none
// before its start settle; then, the members of the instances starting
// with it known (the members whose entry says they are starting, or
// that hold a lease since: startOwners), it creates only the missing leases the start
// gives it (startAssign): the ones its plan takes, so each lease is
// created and taken by one instance, in the same pass. The others it leaves to the
// instances the start gives them to, and plans as if they held them
// (reserved). A lease still missing at this owner's next pass (its
// creator died or is slow, or their views of the members differed) is
// created by whichever owner sees it missing then (awaiting), as any
// missing lease is.

// startCreates creates, at a fleet's start, the leases of missing (the
// shards the first listing found without one, as missingLeases made them)
// that startAssign gives this owner and that are still missing, and
// returns the start's assignment of the active leases, by shard id, for
// balance to plan with (reserved). The rest of missing it leaves to their
// owners (awaiting). When its creates took longer than the start settle
// (a large stream on a slow table), the members and leases it planned
// with are stale: it reads them again and assigns again, at most twice.
func (c *Coordinator) startCreates(ctx context.Context, lin *Lineage, missing []lease.Lease, view *memberView, leases *[]lease.Lease, byShard map[string]lease.Lease, pinnedHere map[string]bool) (map[string]string, error) {
	for round := 0; ; round++ {
		assign, active := startAssign(lin, byShard, missing, startOwners(c.cfg.Owner, *view, byShard))
		began := time.Now()
		created := 0
		for _, nl := range missing {
			if _, ok := byShard[nl.ShardID]; ok || assign[nl.ShardID] != c.cfg.Owner {
				continue
			}
			l, made, err := c.createLease(ctx, nl)
			if err != nil {
				return nil, err
			}
			created++
			if made && nl.Checkpoint == lease.CheckpointAtTimestamp {
				pinnedHere[nl.ShardID] = true
			}
			byShard[nl.ShardID] = l
			*leases = append(*leases, l)
		}
		if created == 0 || round == 2 || time.Since(began) < c.cfg.startSettle() {
			c.awaiting = nil
			for _, nl := range missing {
				if _, ok := byShard[nl.ShardID]; !ok {
					if c.awaiting == nil {
						c.awaiting = map[string]lease.Lease{}
					}
					c.awaiting[nl.ShardID] = nl
				}
			}
			if len(c.awaiting) > 0 {
				c.log.Debug("leases left to the instances starting beside this one", "count", len(c.awaiting))
			}
			reserve := make(map[string]string, len(active))
			for _, id := range active {
				reserve[id] = assign[id]
			}
			return reserve, nil
		}
		v, err := c.readMembers(ctx)
		if err != nil {
			return nil, err
		}
		ls, err := c.cfg.Leases.List(ctx, c.cfg.Namespace)
		if err != nil {
			return nil, &Error{Op: "lease list", Stream: c.cfg.Stream, Err: err}
		}
		*view, *leases = v, ls
		for _, l := range ls {
			byShard[l.ShardID] = l
		}
	}
}

// startOwners returns the owners a fleet's start gives leases to (sorted):
// me and the live members of view that are starting too, by their entry
// (lease.Member.Starting: in their first pass) or by the listing (byShard:
// they hold an active lease, which, at a fleet's start, they took since
// this owner's first listing, which showed every lease free). Every
// instance starting beside this one says so from its first heartbeat,
// written before its start settle, until its first pass is over, and
// holds its share from then on. Any other entry may be a dead instance's:
// readMembers counts an entry alive until its beat has stood still for
// the failover time, and the leases given to a dead one would be created
// a pass later and read only once it counts as dead. A live instance that
// is not starting and holds nothing gets its share by asking, as a joiner
// does.
func startOwners(me string, view memberView, byShard map[string]lease.Lease) []string {
	holding := map[string]bool{}
	for _, l := range byShard {
		if l.Owner != "" && l.Checkpoint != lease.CheckpointShardEnd {
			holding[l.Owner] = true
		}
	}
	out := []string{me}
	for o, m := range view.all {
		if o != me && view.live[o] && (m.Starting || holding[o]) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// startAssign gives each shard of lin with a lease (in byShard) or one to
// create (in missing) to one of owners (sorted), by shard id, and returns
// the active ones (not SHARD_END), sorted: those in the order of their
// ids, in runs, to the owners
// in the order of theirs, the first active % owners owners one more, as
// planBulk gives a fleet whose leases are all free; the finished ones
// (SHARD_END: only created, never read) by rendezvous hashing. It depends
// on the shards and the owners alone, not on which leases exist or whose
// they are yet, so instances that start together and see the same members
// assign alike, however far each has got.
func startAssign(lin *Lineage, byShard map[string]lease.Lease, missing []lease.Lease, owners []string) (assign map[string]string, active []string) {
	toCreate := make(map[string]lease.Lease, len(missing))
	for _, l := range missing {
		toCreate[l.ShardID] = l
	}
	out := map[string]string{}
	for _, id := range lin.IDs() {
		l, ok := byShard[id]
		if !ok {
			l, ok = toCreate[id]
		}
		switch {
		case !ok:
		case l.Checkpoint == lease.CheckpointShardEnd:
			out[id] = rendezvous(id, owners)
		default:
			active = append(active, id)
		}
	}
	if len(owners) == 0 {
		return out, active
	}
	base, extra := len(active)/len(owners), len(active)%len(owners)
	next := 0
	for i, o := range owners {
		n := base
		if i < extra {
			n++
		}
		for _, id := range active[next : next+n] {
			out[id] = o
		}
		next += n
	}
	return out, active
}

// rendezvous returns the owner whose hash with id is the highest.
func rendezvous(id string, owners []string) string {
	best, top := "", uint64(0)
	for _, o := range owners {
		h := fnv.New64a()
		h.Write([]byte(o))
		h.Write([]byte{0})
		h.Write([]byte(id))
		if v := h.Sum64(); best == "" || v > top {
			best, top = o, v
		}
	}
	return best
}

// reserved is the listing as a fleet's start plans it (startCreates): each
// free lease, and a placeholder for each active lease not created yet,
// reserved (PendingOwner) for the owner the start gives it to, so that
// planBulk gives every owner what the start gives it, this owner takes
// the leases it created and the others' count for them. The placeholders
// are never written: they are planned with, not listed.
func reserved(namespace string, leases []lease.Lease, reserve map[string]string) []lease.Lease {
	if len(reserve) == 0 {
		return leases
	}
	out := make([]lease.Lease, 0, max(len(leases), len(reserve)))
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		seen[l.ShardID] = true
		if o, ok := reserve[l.ShardID]; ok && l.Owner == "" && l.PendingOwner == "" && l.Checkpoint != lease.CheckpointShardEnd {
			l.PendingOwner = o
		}
		out = append(out, l)
	}
	ids := make([]string, 0, len(reserve))
	for id := range reserve {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, lease.Lease{Key: lease.KeyFor(namespace, id), ShardID: id, PendingOwner: reserve[id]})
	}
	return out
}
