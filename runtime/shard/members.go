package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Liveness per instance (LivenessPerInstance). Every Renew the keeper
// writes this owner's member entry (one write, whatever it holds) and moves
// the self-fence of every held lease to the failover time after that
// write's send time, exactly as a lease write moves its own. Every pass
// reads the namespace's members (one consistent read: the item that holds
// them, or the Query of their items, as the store lays them out). An owner whose entry
// has not changed for Failover, on this host's clock, or that says it is
// fenced (lease.Member.Fenced), is dead: its leases are expired. The leases of owners without an entry (an older version of
// this runtime, or a Java KCL worker: they renew every lease) are judged by
// their counters as before, and while any such owner holds a lease this
// owner renews its own leases too and lists every pass (compat), so that
// they see it alive and it sees their requests. A member whose entry says
// it is leaving (lease.Member.Leaving: it is stopping) is alive, but the
// plans give it no share and no lease and ask it for none (withoutLeaving).
//
// A pass lists the leases only when it has something to do: at start,
// when it holds fewer than its share by the members' counts and the leases
// it knows of (a joiner, the survivors of a dead or departed owner), while
// it asks for leases or has just taken some, when new shards were found,
// after a fleet's start left leases to other instances to create (to
// create those still missing: start.go), or in compat. At rest a pass reads the members and nothing else, and
// writes nothing.
//
// Handoff requests travel with the asker's entry (Member.Asks): an owner
// that writes nothing at rest would not see them on the lease. It reads the
// asked leases it holds, adopts the request and hands them over as ever
// (stop, settle, checkpoint, release). A live member is never forced: the
// asker waits for the release, or for the owner to keep the lease, which
// clears the request.

// startSettles reports whether this owner's first pass waits for the
// instances starting with it (startSettle) before it takes any lease: with
// bulk balancing, when no other owner holds an active lease of the first
// listing, so every lease is free. Instances that start together would
// otherwise each take free leases by the members they have seen so far
// (the first of them all of them) and hand most of them on a pass later,
// so that the start moved up to twice the leases it needs to. After the
// wait every instance that wrote its first heartbeat by then is in each
// view, their plans agree, and each free lease is taken once; on a stream
// without leases each is created once too, by the instance that takes it
// (startCreates). A joiner
// (others hold leases) and a survivor taking a dead owner's leases do not
// wait: their first pass is not a fleet's start, or not their first; nor
// does an owner whose lease store nobody else can reach (Config.Alone).
func (c *Coordinator) startSettles(leases []lease.Lease) bool {
	if c.members == nil || c.cfg.Balance != BalanceBulk || c.cfg.Alone {
		return false
	}
	for _, l := range leases {
		if l.Checkpoint != lease.CheckpointShardEnd && l.Owner != "" && l.Owner != c.cfg.Owner {
			return false
		}
	}
	return true
}

// memberView is what one pass knows of the members.
type memberView struct {
	all  map[string]lease.Member
	live map[string]bool // live members, this owner included
	// sent is when the read was sent: the view says who was alive then.
	sent time.Time
	// read, after a roster read of the watched entries only, are the
	// members whose entries it read (the rest are as the last full read
	// showed them, and live unless declared dead); nil: every entry.
	read map[string]bool
	// first is when this owner first saw each member's entry (anew when
	// it beats again after looking dead): a member judges another dead
	// only a failover time after it first saw that one's entry, so one
	// seen for less than that cannot judge an owner dead by its beat yet
	// (canJudge).
	first map[string]time.Time
}

// canJudge reports whether member o, by what this owner saw of it at at,
// can already judge the owner of l (or, released, its asker) stopped, as
// this owner does: it has seen o's entry for the failover time, or the
// owner says it is dead (fenced, or declared: o reads that at once), or
// l names nobody else (free, or o's own). A member that joined after the
// owner's last beat first saw that beat when it joined, and would leave
// a lease the plans give it unread until a failover time after that
// (issue 29, dst mix churn seed 1796567417450576642). Not known to be
// younger: it can.
func (v memberView) canJudge(o string, l lease.Lease, at time.Time, failover time.Duration) bool {
	who := l.Owner
	if who == "" {
		who = l.PendingOwner
	}
	if who == "" || who == o {
		return true
	}
	if m := v.all[who]; m.Fenced || m.Dead {
		return true
	}
	return !v.joinedWithin(o, at, failover)
}

// joinedWithin reports whether this owner first saw o's entry less than d
// before at.
func (v memberView) joinedWithin(o string, at time.Time, d time.Duration) bool {
	f, ok := v.first[o]
	return ok && at.Sub(f) < d
}

// liveOwners returns the live members, sorted.
func (v memberView) liveOwners() []string {
	out := make([]string, 0, len(v.live))
	for o := range v.live {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// leaving reports whether owner is a live member that is leaving
// (lease.Member.Leaving): it takes no lease; its own stay its until it is
// dead.
func (v memberView) leaving(owner string) bool {
	return owner != "" && v.live[owner] && v.all[owner].Leaving
}

// planOwners returns the live members that are not leaving, sorted: those
// the plans share the leases among.
func (v memberView) planOwners() []string {
	out := make([]string, 0, len(v.live))
	for o := range v.live {
		if !v.leaving(o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// readMembers reads the namespace's members and judges who is alive.
// A beat's clock starts when the read that shows it has returned, after
// the write was sent: so no owner is judged dead before its own fence.
// Its age is judged at the time the read was sent, never at when its
// answer was processed: an answer read just before a pause (GC, SIGSTOP,
// a frozen VM) and processed after it shows what was alive before the
// pause, and would make every beat it shows unchanged look a pause old
// (issue 29, defect 6). The store answered after that send, so a beat
// that stood still for Failover up to the send stood still at least that
// long.
//
// With the roster (Config.Roster) a read may return the watched entries
// only (readRoster): the others are as the last full read showed them,
// and count alive unless declared dead (lease.Member.Dead), which their
// watchers do.
func (c *Coordinator) readMembers(ctx context.Context) (memberView, error) {
	sent := time.Now()
	var ms []lease.Member
	var read map[string]bool
	var err error
	if c.roster != nil {
		ms, read, sent, err = c.readRoster(ctx)
	} else {
		ms, err = c.members.Members(ctx, c.cfg.Namespace)
	}
	if err != nil {
		return memberView{}, &Error{Op: "lease members", Stream: c.cfg.Stream, Err: err}
	}
	now := time.Now()
	v := memberView{all: make(map[string]lease.Member, len(ms)), live: map[string]bool{c.cfg.Owner: true}, sent: sent, read: read, first: make(map[string]time.Time, len(ms))}
	beats := make([]lease.Lease, len(ms))
	var seen []lease.Lease
	for i, m := range ms {
		v.all[m.Owner] = m
		beats[i] = lease.Lease{Key: m.Owner, Owner: m.Owner, Counter: m.Beat}
		if read[m.Owner] {
			seen = append(seen, beats[i])
		}
	}
	if read == nil {
		c.beats.observe(beats, now)
	} else {
		c.beats.observeSome(seen, now)
	}
	for i, m := range ms {
		if f, ok := c.beats.firstSeen(m.Owner); ok {
			v.first[m.Owner] = f
		}
		switch {
		case m.Fenced || m.Dead:
			// A fenced member is dead at once: it reads nothing it holds
			// (lease.Member.Fenced); so is one declared dead.
		case read != nil && !read[m.Owner]:
			v.live[m.Owner] = true // not watched by this owner: its watchers declare it
		case c.noticeFell(m, sent):
			// A watcher's notice of it fell due with its beat unchanged.
		case !c.beats.stale(beats[i], sent, c.cfg.Failover):
			v.live[m.Owner] = true
		}
	}
	c.mu.Lock()
	c.view = v
	c.mu.Unlock()
	return v, nil
}

// heartbeat writes this owner's member entry and, once it is confirmed
// (answered without error), moves the fence of every lease held when it
// lands, to fenceAfter past when the beat was first sent. A lease taken
// while the beat was in flight is moved too (issue 29, defect 7): with
// liveness per instance the others judge this owner by its beat alone, and
// they see the new beat no earlier than it was sent, whenever the lease was
// taken; a lease is never moved earlier (renewed), so one taken after the
// beat was sent keeps the later of the two.
//
// The others judge this owner alive only while its beat moves, and the
// beat moves only on confirmed heartbeats (issue 29, defect 2): one that
// landed but was answered late, or with an error, leaves the next
// heartbeat writing the same beat. The fence counts from when the
// confirmed beat was first sent: the others' clock for that beat starts
// no earlier. A beat that lands unconfirmed still looks alive for a
// failover time from when it is first seen, longer than this owner's
// fence; so every heartbeat sent past the fence (but the first of a new
// beat) says the owner is fenced (lease.Member.Fenced), and the others
// count it dead at once. Such a heartbeat, confirmed, renews nothing:
// the others may be taking its leases on it. The next heartbeat, at once
// (beatDue), writes a new beat without the flag, and that one, confirmed,
// ends the fence. Whether the store is slow, throttled, failing or late,
// an owner that cannot confirm its heartbeats looks dead to the others
// no later than the first heartbeat of its that lands past its fence,
// and at the latest a failover time after its last beat landed.
func (c *Coordinator) heartbeat(ctx context.Context) error {
	// A channel, not a sync.Mutex: a heartbeat waiting on a slow one gives
	// up with its ctx, and is durably blocked in a synctest bubble.
	select {
	case c.beatSem <- struct{}{}:
	case <-ctx.Done():
		return &Error{Op: "lease heartbeat", Stream: c.cfg.Stream, Err: ctx.Err()}
	}
	defer func() { <-c.beatSem }()
	held := len(c.snapshot()) + int(c.leftHeld.Load())
	leaving := c.leaving.Load()
	c.mu.Lock()
	asks := make([]string, 0, len(c.pending))
	for key := range c.pending {
		if !leaving { // a leaving owner asks for nothing
			asks = append(asks, key[strings.LastIndex(key, "/")+1:])
		}
	}
	c.mu.Unlock()
	slices.Sort(asks) // the order its owners answer them in
	sent := time.Now()
	first := c.beatNew || c.beatFirst.IsZero()
	if first {
		c.beat.Add(1)
		c.beatFirst, c.beatNew = sent, false
	}
	// Past a fence it had: every lease held is past its fence too (none
	// is renewed past beatUntil), and nothing is taken until a new beat
	// is confirmed (beatStale). The first write of a new beat is the way
	// back, unfenced; once a beat was written fenced, every later write
	// of it is (the owner stays past its fence until a new one is
	// confirmed), so that readers of both copies of an entry
	// (lease.MembersMigrating) may take the fenced one for the later.
	wasStale := c.beatUntil.Load() != 0 && c.beatStale()
	fenced := wasStale && !first
	c.beatSaid.Store(fenced)
	if c.roster != nil && c.rs.rejoin {
		// Declared dead: a new entry (this is the first write of a new
		// beat), seen by the others once the roster is bumped below.
		if err := c.members.Leave(ctx, c.cfg.Namespace, c.cfg.Owner, 0); err != nil {
			return &Error{Op: "lease heartbeat", Stream: c.cfg.Stream, Err: err}
		}
		c.rs.rejoin, c.rs.owed = false, true
	}
	if until := c.beatUntil.Load(); until != 0 && !wasStale {
		// Answered past the fence, a heartbeat revives no lease (each is
		// fenced by then), and the next one says the owner is fenced:
		// give up waiting at the fence, so that the others learn of it
		// at once and not a lease call's deadline later.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.epoch.Add(time.Duration(until)))
		defer cancel()
	}
	m := lease.Member{Owner: c.cfg.Owner, Beat: c.beat.Load(), Held: held, Asks: asks, Starting: c.starting.Load(), Fenced: fenced, Leaving: leaving, Roster: c.roster != nil}
	err := c.members.Heartbeat(ctx, c.cfg.Namespace, m)
	if c.roster != nil && errors.Is(err, lease.ErrDeclaredDead) {
		// A watcher saw this owner's beat stand still for the failover
		// time: it is past its fence, and holds nothing it reads.
		c.log.Warn("this owner's member entry was declared dead: rejoining")
		c.rs.rejoin, c.beatNew = true, true
		// The refusal is an answer: the store is back. Rejoin at once,
		// not a failed heartbeat's backoff later: the store may answer
		// only for a while, and this owner reads nothing until it is
		// back (fleettest/dst mix late, seed 1796595926111222315).
		c.beatDue.Store(true)
		select { // refused to a pass's heartbeat: wake the loop
		case c.beatKick <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return &Error{Op: "lease heartbeat", Stream: c.cfg.Stream, Err: err}
	}
	if c.roster != nil {
		// What the others read from the whole list only (all but the
		// beat) changed, or this owner joined or is back: the roster is
		// bumped. Coming back (from its fence, a declaration, or before
		// its first beat) the heartbeat counts as confirmed only once the
		// bump is: a member seen dead by a view is seen alive again only
		// after a bump. Otherwise bumpLoop bumps (passBump; else the next
		// pass): a second call here would delay the next heartbeat by a
		// call's deadline, and a slow store answering within it would
		// fence a live owner (issue 29, defect 7).
		key := fmt.Sprint(m.Held, m.Asks, m.Starting, m.Fenced, m.Leaving)
		switch {
		case c.rs.owed || wasStale || c.beatUntil.Load() == 0 || (leaving && key != c.rs.wrote):
			// (Leaving: no pass runs any more to bump.)
			bumpSent := time.Now()
			if _, err := c.roster.BumpRoster(ctx, c.cfg.Namespace); err != nil {
				c.rs.owed = true
				return &Error{Op: "lease roster bump", Stream: c.cfg.Stream, Err: err}
			}
			c.rs.owed, c.rs.wrote = false, key
			if !leaving && time.Since(bumpSent) > c.cfg.leaseCallTimeout()/4 {
				// A slow store (issue 29, defect 7): the beat's validity
				// counts from the write before the bump, so the bump's
				// wait took a call's time from what the pass's takes have
				// to land in; with calls near their deadline they landed
				// past the fence, every time (fleettest/dst mix all, seed
				// 1796587923443683974). A new beat written now, the bump
				// behind it, gives back the time a way back without the
				// roster has. Failed, the beat before it still stands.
				m.Beat = c.beat.Add(1)
				again := time.Now()
				if err := c.members.Heartbeat(ctx, c.cfg.Namespace, m); err == nil {
					c.beatFirst = again
				}
			}
		case key != c.rs.wrote:
			// Not a pass woken for it: during handoffs every change of
			// Held or Asks would run a pass more (members read, asked
			// leases read again, a listing), on the asker and on each
			// owner asked.
			c.rs.wrote = key
			c.rs.passBump.Store(true)
			select {
			case c.bumpKick <- struct{}{}:
			default:
			}
		}
	}
	c.beatNew = true
	if fenced {
		c.beatDue.Store(true)
		// Made by a pass (after asking for leases), it finds the loop
		// waiting out its backoff: wake it for the way back.
		select {
		case c.beatKick <- struct{}{}:
		default:
		}
		return nil
	}
	// The way back is made: a beatDue still set (a fenced beat a pass
	// confirmed while the loop waited) would pace the next beat at the
	// new fence (fleettest/dst mix all, seed 1796553848717798450).
	c.beatDue.Store(false)
	sent = c.beatFirst
	until := int64(sent.Sub(c.epoch) + c.cfg.fenceAfter())
	for {
		cur := c.beatUntil.Load()
		if until <= cur || c.beatUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	for _, o := range c.snapshot() {
		c.renewed(o, sent)
	}
	return nil
}

// answerAsks starts handing over the leases other members asked for: the
// request is on the lease (RequestHandoff bumped its counter), which this
// owner reads and adopts before it checkpoints and releases.
func (c *Coordinator) answerAsks(ctx context.Context, v memberView) {
	for _, owner := range v.liveOwners() { // sorted: the order of the handoffs
		m, ok := v.all[owner]
		if !ok || owner == c.cfg.Owner {
			continue
		}
		for _, id := range m.Asks {
			c.mu.Lock()
			o := c.owned[id]
			c.mu.Unlock()
			if o == nil || o.fctx.Err() != nil {
				continue
			}
			c.adoptRequest(ctx, o)
		}
	}
}

// adoptRequest reads o's lease and, when another owner has asked for it,
// takes the request (and the counter it bumped) in and hands o over.
func (c *Coordinator) adoptRequest(ctx context.Context, o *owned) {
	o.mu.Lock()
	st := o.stateNow()
	busy := st.handing() || st == stGone
	o.mu.Unlock()
	if busy {
		return
	}
	cur, err := c.cfg.Leases.Get(ctx, o.key)
	if err != nil {
		if !errors.Is(err, lease.ErrNotFound) {
			c.log.Warn("handoff: reading an asked lease failed", "shard", o.shard, "err", err)
		}
		return
	}
	c.adopt(o, cur)
}

// adopt takes a read of o's lease in when it is still this owner's and
// newer than what o holds, and starts handing it over when it is asked for.
func (c *Coordinator) adopt(o *owned, cur lease.Lease) {
	if cur.Owner != c.cfg.Owner {
		return // lost: the next write of it finds out and stops the reader
	}
	o.mu.Lock()
	if o.stateNow() != stGone && cur.Counter > o.l.Counter {
		o.setLease(cur, time.Time{})
	}
	o.mu.Unlock()
	c.answerHandoff(o)
}

// deadMembers returns the entries of v's dead members that hold no lease
// in leases any more, by owner: dropDeadMembers removes them, so the
// members item does not grow with every instance that ever crashed.
func deadMembers(v memberView, leases []lease.Lease) []lease.Member {
	holding := map[string]bool{}
	for _, l := range leases {
		if l.Owner != "" {
			holding[l.Owner] = true
		}
	}
	var out []lease.Member
	for owner, m := range v.all {
		if v.live[owner] || holding[owner] {
			continue
		}
		m.Owner = owner
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b lease.Member) int { return strings.Compare(a.Owner, b.Owner) })
	return out
}

// dropDeadMembers removes the entries dead (deadMembers), each
// conditional on the beat seen: one that came back stays.
func (c *Coordinator) dropDeadMembers(ctx context.Context, dead []lease.Member) {
	for _, m := range dead {
		if err := c.members.Leave(ctx, c.cfg.Namespace, m.Owner, m.Beat); err == nil {
			c.log.Info("dead instance's member entry removed", "dead", m.Owner)
			c.bumpRoster(ctx)
		}
	}
}

// takeBack resolves the leases of this listing that still name this owner
// but that it no longer holds: fenced after its heartbeats failed for a
// while, or left by an earlier run under the same owner id. To every other
// instance they are a live member's leases, which never expire for them and
// which they never take; so this owner takes them back, whatever its share
// (the plan moves a surplus by handoff as ever), or releases one another
// live member asked for to that asker, which takes it as handed over. (Left
// to the plan as free leases, one could go to an owner below its share that
// never takes it: its shard was read by nobody while this owner lived.) A
// lease it fails to resolve is still in the last listing under its name,
// so the next pass lists again (leftBehind) and retries.
func (c *Coordinator) takeBack(ctx context.Context, leases []lease.Lease, byShard map[string]lease.Lease, v memberView) []error {
	held := c.heldKeys()
	var errs []error
	for i, l := range leases {
		var nl lease.Lease
		var err error
		var op string
		switch takeBackStep(c.cfg.Owner, l, held, v) {
		case leftAlone:
			continue
		case releaseToAsker:
			op = "lease release"
			if nl, err = c.cfg.Leases.Release(ctx, l); err == nil {
				c.forgetFenced(l.ShardID)
				c.log.Info("lease left behind released to the owner that asked for it", "shard", l.ShardID, "to", l.PendingOwner)
			}
		case takeItBack:
			op = "lease take"
			nl, err = c.takeLease(ctx, l)
		}
		switch {
		case err == nil:
			leases[i], byShard[l.ShardID] = nl, nl
		case !errors.Is(err, lease.ErrLeaseLost):
			// (Lost: another owner has it, or it was written since; the
			// next listing shows which.)
			errs = append(errs, &Error{Op: op, Stream: c.cfg.Stream, Shard: l.ShardID, Err: err})
		}
	}
	return errs
}

// takeBackAction is what takeBack does with a listed lease.
type takeBackAction int

const (
	leftAlone      takeBackAction = iota // not left behind: another's, held here, or ended
	takeItBack                           // left in me's name: me takes it back
	releaseToAsker                       // left in me's name and asked for by a live member
)

// takeBackStep decides takeBack for l as listed, given the keys me holds
// (or asked for) and the members view.
func takeBackStep(me string, l lease.Lease, held map[string]bool, v memberView) takeBackAction {
	switch {
	case l.Owner != me || held[l.Key] || l.Checkpoint == lease.CheckpointShardEnd:
		return leftAlone
	case l.PendingOwner != "" && l.PendingOwner != me && v.live[l.PendingOwner]:
		return releaseToAsker
	}
	return takeItBack
}

// leftBehind reports whether the last listing shows an unfinished lease
// under this owner's name that it no longer holds (see takeBack), so that
// a pass lists again: fenced, or lost in a way this owner did not see. A
// lease it let go of since that listing itself (a release, a handoff, a
// write that found another owner) is not left behind: the store moved it
// on past the listed state (letGo), and a listing would show nothing to
// take back. One fenced is still named this owner's and is taken back.
func (c *Coordinator) leftBehind() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fences != c.listedFences {
		// Fenced since the last listing was sent, which may not show the
		// lease in this owner's name: one taken after it by following a
		// handoff (followHandoffs) is not in it so (issue 29).
		return true
	}
	for id, l := range c.known {
		if l.Owner != c.cfg.Owner || l.Checkpoint == lease.CheckpointShardEnd {
			continue
		}
		if counter, ok := c.letGo[id]; ok && counter >= l.Counter {
			continue
		}
		if o := c.owned[id]; o == nil || o.fctx.Err() != nil {
			return true
		}
	}
	return false
}

// pruneFenced forgets the fenced leases a new listing (known) shows under
// another owner: taken since, expired to the others. Guarded by passMu,
// as known is.
func (c *Coordinator) pruneFenced() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.fenced {
		if l, ok := c.known[id]; ok && l.Owner != c.cfg.Owner {
			delete(c.fenced, id)
		}
	}
}

// pruneLetGo forgets what a new listing (known) shows already: the leases
// it lists at or past the counter they were let go at, or not at all.
func (c *Coordinator) pruneLetGo() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, counter := range c.letGo {
		if l, ok := c.known[id]; !ok || l.Counter >= counter {
			delete(c.letGo, id)
		}
	}
}

// beatStale reports whether the last successful heartbeat is older than
// the fence allows: the others may take this owner for dead, so it takes
// and asks for nothing (what it took would be fenced at once).
func (c *Coordinator) beatStale() bool {
	return c.members != nil && time.Since(c.epoch) >= time.Duration(c.beatUntil.Load())
}

// isCompat reports whether this owner renews every lease it holds: always
// with LivenessPerLease, and with LivenessPerInstance while an owner
// without a member entry holds a lease.
func (c *Coordinator) isCompat() bool {
	if c.members == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compat
}
