package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Stop stops fetching, waits (bounded by ctx) for delivered records to settle
// (past half of ctx's time, only for those a handler already runs: settle),
// writes final checkpoints and releases leases, the ones it fenced that
// still name it too (endFenced). A lease with a record that a handler
// still runs when ctx ends is left to expire instead (its handlers'
// contexts, Record.Lease, are cancelled): the error then matches
// ErrLeftToExpire and a *LeftToExpireError names the shards.
func (c *Coordinator) Stop(ctx context.Context) error {
	c.mu.Lock()
	if c.state == stopped {
		c.mu.Unlock()
		return nil
	}
	wasRunning := c.state == running
	c.state = stopped
	c.mu.Unlock()
	if !wasRunning {
		return nil
	}

	// 1. No new passes, no new readers. A pass in progress gives up its
	// remote call at once; taking passMu waits for it to return, and none
	// starts after.
	c.passCancel()
	c.passMu.Lock()
	c.passMu.Unlock() //lint:ignore SA2001 a barrier, not a critical section
	list := c.snapshot()
	// Say so in the member entry at once: the others' plans give this
	// owner no share and no free lease from now on (it takes none), so
	// what it releases is taken within a pass, also when a lease of it is
	// left to expire and the entry stays (lease.Member.Leaving). Beside
	// the settling, which a slow store must not delay; awaited before the
	// releases.
	said := c.leave(ctx)

	// 2. Stop fetching; delivered records stay in flight.
	var sessions []*session
	var shards []string // the sessions' shards
	for _, o := range list {
		if s := o.session(); s != nil {
			s.cancel()
			sessions = append(sessions, s)
			shards = append(shards, o.shard)
		}
	}
	for _, s := range sessions {
		<-s.done
	}

	// 3. Let them settle, bounded by ctx. The keeper keeps renewing meanwhile.
	var errs []error
	if err := c.settle(ctx, sessions); err != nil {
		errs = append(errs, c.unsettled(sessions, shards, err))
	}

	// 4. Stop the loops, then write final checkpoints and release every
	// lease held now (the keeper may have taken one while we waited), or
	// leave it to expire as finalStep says. The
	// heartbeats go on until that is done, and so do the renewals of an
	// owner that renews each lease (they are its heartbeats): final writes
	// retried for longer than the fence time would otherwise be cut off
	// by this owner's own fence, leaving its leases neither checkpointed
	// nor released.
	c.cancel()
	c.loops.Wait()
	<-said
	list = c.snapshot()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWrites)
	defer cancel()
	stopRenewing := c.renewDuring(wctx)
	werrs, left := c.writeFinal(wctx, list)
	errs = append(errs, werrs...)
	left = append(left, c.endFenced(wctx)...)

	// 5. Leave the member entry as exitStep says.
	exit := exitStep(c.members != nil, len(left))
	if exit == exitLastBeat {
		c.leftHeld.Store(int32(len(left)))
		if err := c.heartbeat(wctx); err != nil {
			c.log.Warn("stop: last heartbeat failed", "err", err)
		}
	}
	stopRenewing()
	c.beatCancel()
	c.beating.Wait()
	if exit == exitRemove {
		if err := c.leaveMembers(wctx); err != nil {
			errs = append(errs, &Error{Op: "lease leave", Stream: c.cfg.Stream, Err: err})
		} else {
			c.bumpRoster(wctx)
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		c.cfg.Counters.LeftToExpire.Add(uint64(len(left)))
		c.log.Warn("stop: handlers still run records: leases left to expire, taken by another instance after the failover time",
			"shards", left, "failover", c.cfg.Failover)
		errs = append(errs, &LeftToExpireError{Stream: c.cfg.Stream, Shards: left, Failover: c.cfg.Failover})
	}
	c.mu.Lock()
	c.drained = true
	c.mu.Unlock()
	c.workers.Wait()
	c.log.Info("coordinator stopped", "held", len(list), "left_to_expire", len(left))
	return errors.Join(errs...)
}

// finalTries is how many times Stop sends a release or the removal of its
// member entry that fails: a store that answers one call late (slow, not
// failed) gets another chance, and one that never answers costs Stop a few
// calls' deadlines, not the whole of finalWrites per step.
const finalTries = 3

// releaseFinal is release, tried up to finalTries times while it fails and
// ctx (Stop's final writes) lasts: a lease whose release got no answer in
// time would otherwise wait out the failover time for its next owner. A
// release that landed with its answer lost finds the lease no longer this
// owner's on the next try, and ends there (mutate).
func (c *Coordinator) releaseFinal(ctx context.Context, o *owned) error {
	return c.retryWrite(ctx, finalTries, "final release", o.shard, "stop: release failed; retrying",
		func() error { return c.release(ctx, o) })
}

// leaveMembers removes this owner's member entry, tried up to finalTries
// times while it fails and ctx (Stop's final writes) lasts: a store that
// answers one call late must not leave the entry to the others' failover
// time, nor fail Stop. Removing an absent entry is no error, so a removal
// whose answer was lost may be sent again.
func (c *Coordinator) leaveMembers(ctx context.Context) error {
	return c.retryWrite(ctx, finalTries, "leave", "", "stop: removing the member entry failed; retrying",
		func() error { return c.members.Leave(ctx, c.cfg.Namespace, c.cfg.Owner, 0) })
}

// leave marks this owner as leaving and, with liveness per instance,
// writes its member entry so at once (bounded by a lease call's deadline;
// on failure the next heartbeat says it).
// The returned channel closes when that write has returned.
func (c *Coordinator) leave(ctx context.Context) <-chan struct{} {
	c.leaving.Store(true)
	done := make(chan struct{})
	if c.members == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.leaseCallTimeout())
		defer cancel()
		if err := c.heartbeat(hctx); err != nil {
			c.log.Warn("stop: heartbeat saying this owner leaves failed", "err", err)
		}
	}()
	return done
}

// settle waits, bounded by ctx, until the delivered records of sessions
// no longer run. For the first half of ctx's time every delivered record
// may still begin and settle; then none that a lane has not handed to a
// handler yet may begin (Record.Stale), and the rest of the time waits
// for those that handlers run. Releasing a lease while one of its records
// is being handled would let the next owner handle it again meanwhile
// (issue 29, defect 1: a graceful leave, like a handoff, must not); the
// records never begun are read again by the next owner, from the
// checkpoint before the first of them. A lease whose handler outruns the
// whole of ctx is left to expire, not released (writeFinal).
func (c *Coordinator) settle(ctx context.Context, sessions []*session) error {
	first := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		first, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
		defer cancel()
	}
	i := 0
	for ; i < len(sessions); i++ {
		if sessions[i].wm.wait(first) != nil {
			break
		}
	}
	if i == len(sessions) {
		return nil
	}
	for _, s := range sessions[i:] {
		s.wm.close() // also when ctx has ended: nothing begins past Stop's time
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, s := range sessions[i:] {
		if err := s.wm.wait(ctx); err != nil {
			return err
		}
	}
	var skipped uint64
	for _, s := range sessions[i:] {
		skipped += s.wm.pending()
	}
	if skipped > 0 {
		c.log.Warn("stop: records not begun in half the stop's time are left to the shards' next owner", "records", skipped)
	}
	return nil
}

// finalSlots bounds the leases whose final writes Stop runs at once.
const finalSlots = 16

// cancelGrace is how long a Stop whose time ran out still waits, once it
// cancelled the contexts of handlers that run records of a lease, for
// those that honour their context to return before it decides between
// releasing the lease and leaving it to expire.
const cancelGrace = 250 * time.Millisecond

// writeFinal checkpoints and releases the leases of list within ctx, side
// by side (finalSlots at a time), so that a lease whose checkpoint keeps
// failing takes no time from the others; it retries only until a reserve
// (a lease call's deadline, at most 1 s) before ctx ends, and is released
// all the same: its next owner reads again from its last checkpoint, at
// once rather than after the failover time.
//
// A lease with a record still in a handler is not released (left: its
// shards): the next owner would handle the record again at once, beside
// the handler (issue 29, defect 1). Its handlers' contexts are cancelled,
// its settled prefix is checkpointed, and it is dropped without a write:
// it expires a failover time after this owner's last renewal, as a
// crashed owner's does (leaveToExpire).
func (c *Coordinator) writeFinal(ctx context.Context, list []*owned) (errs []error, left []string) {
	pctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, dl.Add(-min(c.cfg.leaseCallTimeout(), time.Second)))
		defer cancel()
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		slots = make(chan struct{}, finalSlots)
	)
	for _, o := range list {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			// The checkpoint is the settled prefix as Stop's time ran
			// out: what a handler settles once its context is cancelled
			// counts for nothing (the next owner handles it again).
			perr := c.persistFinal(pctx, o)
			step := finalStep(c.cancelHandlers(ctx, o) && c.handled(o))
			var rerr error
			switch step {
			case finalLeaveToExpire:
				c.leaveToExpire(o)
			case finalRelease:
				rerr = c.releaseFinal(ctx, o)
			}
			mu.Lock()
			defer mu.Unlock()
			if step == finalLeaveToExpire {
				left = append(left, o.shard)
			}
			for _, err := range []error{perr, rerr} {
				if err != nil {
					errs = append(errs, err)
				}
			}
		}()
	}
	wg.Wait()
	return errs, left
}

// endFenced ends, within ctx (Stop's final writes), the leases this owner
// fenced and forgot that still name it: a pass would have taken them back
// or released them (takeBack, releaseLeftovers), and none runs again. One
// a handler still runs a record of (fencedRunning) is left to expire, as
// a held lease is (left: its shards); with liveness per instance and its
// heartbeats confirmed again, the others are released, so their next
// owner reads on from the checkpoint at once rather than a failover time
// later. (CI once fenced an owner on every lease during its first
// pass, just before its Stop: the next instance waited out the failover
// time for shards that nothing read.)
func (c *Coordinator) endFenced(ctx context.Context) (left []string) {
	fenced := c.fencedNow()
	// Only once its heartbeats are confirmed again, as a pass: still
	// fenced, it writes nothing, and the others take them once its beat
	// stands still. With liveness per lease no write says that its writes
	// land again (those that failed were the fenced leases' renewals):
	// it writes nothing either, and they expire.
	release := c.members != nil && !c.beatStale()
	for _, shard := range slices.Sorted(maps.Keys(fenced)) {
		f := fenced[shard]
		if f.running() {
			c.log.Info("stop: a handler still runs a record of a fenced lease: left to expire", "shard", shard)
			left = append(left, shard)
			continue
		}
		if !release {
			continue
		}
		cur, err := c.cfg.Leases.Get(ctx, f.key)
		if err == nil && cur.Owner == c.cfg.Owner && cur.Checkpoint != lease.CheckpointShardEnd {
			_, err = c.cfg.Leases.Release(ctx, cur) // (taken since, or ended: nothing of this owner's)
			if err == nil {
				c.forgetFenced(shard)
				c.log.Info("stop: lease left in this owner's name by a fence released", "shard", shard)
			}
		}
		if err != nil && !errors.Is(err, lease.ErrNotFound) && !errors.Is(err, lease.ErrLeaseLost) {
			// Not Stop's failure: it expires, as a crashed owner's does.
			c.log.Warn("stop: releasing a lease left in this owner's name by a fence failed; it expires after the failover time",
				"shard", shard, "err", err)
		}
	}
	return left
}

// fencedNow returns the leases fenced here that may still name this
// owner: those noted in fenced, and those whose fence's timer has just
// run (their context ended) but which are not forgotten and noted yet.
func (c *Coordinator) fencedNow() map[string]fencedLease {
	c.mu.Lock()
	out := maps.Clone(c.fenced)
	var noting []*owned
	for id, o := range c.owned {
		if _, ok := out[id]; !ok && o.fctx.Err() != nil {
			noting = append(noting, o)
		}
	}
	c.mu.Unlock()
	for _, o := range noting {
		o.mu.Lock() // after a write in flight has returned: bounded by its deadline
		out[o.shard] = c.fencedOf(o)
		o.mu.Unlock()
	}
	return out
}

// finalAction is what Stop does with a lease it holds once its time to
// settle is up and its final checkpoint was written.
type finalAction int

const (
	// finalRelease: no record of it is in a handler; the next owner reads
	// on from the checkpoint at once.
	finalRelease finalAction = iota
	// finalLeaveToExpire: a handler still runs one of its records after
	// its context was cancelled and given cancelGrace. Releasing would let
	// the next owner handle that record beside it (issue 29, defect 1), so
	// the lease is dropped unwritten and expires a failover time after
	// this owner's last renewal, as a crashed owner's does.
	finalLeaveToExpire
)

// finalStep decides a held lease's end at Stop; handlerRuns is whether a
// handler still runs a record of it once Stop's time is up.
func finalStep(handlerRuns bool) finalAction {
	if handlerRuns {
		return finalLeaveToExpire
	}
	return finalRelease
}

// exitAction is what Stop writes of this owner's member entry once each
// held lease was released or left to expire.
type exitAction int

const (
	// exitNone: liveness per lease, there is no entry.
	exitNone exitAction = iota
	// exitRemove: the entry is removed, so this owner is gone at once
	// rather than after the failover time: the others list and share out
	// what was released on their next pass.
	exitRemove
	// exitLastBeat: one last heartbeat whose Held counts only the leases
	// left to expire (the others' shares see the released ones), then the
	// entry stays without beating. Removing it would let the others judge
	// those leases by their counters, which may have stood still for long,
	// and take them at once, beside the handler still running; the entry
	// lets them take them a failover time after its last beat.
	exitLastBeat
)

// exitStep decides how Stop leaves the member entry: perInstance is
// whether this owner has one (a lease.MemberStore), leftToExpire how many
// leases finalStep left to expire.
func exitStep(perInstance bool, leftToExpire int) exitAction {
	switch {
	case !perInstance:
		return exitNone
	case leftToExpire > 0:
		return exitLastBeat
	default:
		return exitRemove
	}
}

// handled reports whether a handler may still run a record of o's reader,
// once Stop closed it (Record.Stale: no record begins any more).
func (c *Coordinator) handled(o *owned) bool {
	s := o.session()
	return s != nil && s.wm.running()
}

// cancelHandlers ends, at the end of Stop's time, the contexts of the
// handlers that still run records of o (Record.Lease), and gives those
// that honour it cancelGrace to return; it reports whether any ran.
func (c *Coordinator) cancelHandlers(ctx context.Context, o *owned) bool {
	s := o.session()
	if s == nil {
		return false
	}
	s.wm.close() // nothing begins past Stop's time
	if !s.wm.running() {
		return false
	}
	if o.lctx != nil {
		o.lctx.cancel()
	}
	gctx, cancel := context.WithTimeout(ctx, cancelGrace)
	defer cancel()
	_ = s.wm.wait(gctx)
	return true
}

// leaveToExpire drops o, a lease whose records a handler still runs at
// the end of Stop, without releasing it: no more writes, its reader's
// settlements count for nothing, and another instance takes it once it
// expires, reading again from its checkpoint.
func (c *Coordinator) leaveToExpire(o *owned) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stateNow() != stGone {
		o.drop("left to expire")
		c.forget(o)
	}
}

// unsettled is the error of a stop that ran out of time (err) with
// delivered records not settled: how many, on which shards, so that an
// operator knows what the shards' next owner reads again.
func (c *Coordinator) unsettled(sessions []*session, shards []string, err error) error {
	type left struct {
		shard string
		n     uint64
	}
	var lefts []left
	var total uint64
	for i, s := range sessions {
		if n := s.wm.pending(); n > 0 {
			lefts = append(lefts, left{shards[i], n})
			total += n
		}
	}
	slices.SortFunc(lefts, func(a, b left) int { return strings.Compare(a.shard, b.shard) })
	parts := make([]string, len(lefts))
	for i, l := range lefts {
		parts[i] = fmt.Sprintf("%s: %d", l.shard, l.n)
	}
	return fmt.Errorf("shard: stop: stream %s: %d records not settled (%s), read again by the shards' next owner: %w",
		c.cfg.Stream, total, strings.Join(parts, ", "), err)
}
