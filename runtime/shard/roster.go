package shard

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Roster (Config.Roster, lease.RosterStore): liveness read at a cost
// linear in the instances. Every pass reads the roster's version (one
// small item) and then either the whole member list, when the version
// moved since the last full read (or that read showed a member of an
// earlier version, which bumps nothing, or rosterSweep has passed; and,
// with Config.RosterWhole members or fewer, every pass without the
// version), or
// only the entries of the owner's rosterK successors on the ring of
// roster members sorted by owner (by key). A successor whose beat stood
// still for the failover time (on this owner's clock, judged at send
// times, as any beat), or whose entry says it is fenced, is declared dead
// (a conditional write on its beat) and the version bumped; every
// instance then reads the whole list and counts it dead; the declarer
// takes the dead member's free leases at once, up to the fair share's
// ceiling (takeDeclared), the others theirs at their next pass. Members
// this owner does not watch count alive unless declared dead. The version is
// bumped too at every join, leave and change of what the others read
// from the list only (Held, Asks, Starting, Fenced): by the heartbeat
// itself when the owner joins or comes back (that heartbeat counts as
// confirmed only once the bump is), otherwise by bumpLoop beside the
// heartbeats, so that no pass runs for a bump alone. An owner whose
// heartbeat is refused as declared dead has fenced itself by then; it
// writes a new entry and bumps (it is seen alive only after that bump).
//
// A full read also judges every entry by its beat: one unchanged since a
// full read a failover time or more before is dead, and declared by its
// predecessors (when its watchers died with it, the ring closes over
// them and the next predecessors declare it).
//
// Notices (lease.RosterNotice) remove the pass the others would lag behind
// the declarer, when the store keeps them (lease.RosterNotices; without,
// the roster runs on declarations alone). A watcher that will see a
// successor's beat stand still for the failover time before its next pass
// posts, noticeLead before that moment, a notice on the version item: the
// suspect, its beat and how long until its death falls due (the watcher
// reads the entry by key first, and posts nothing when the beat moved); it
// posts it again (noticeRefreshes) a quarter of a pass apart. Every
// instance that reads the version item (each pass, when it reads the
// watched entries only) sees it at no cost more, and counts its due moment
// from when its read returned: after the notice was sent, so never before
// the watcher's. At that moment it wakes a pass, which reads the suspect's
// entry by key with the watched ones; if it still shows the beat named,
// the suspect is dead for that pass and the ones after (noticeFell), and
// the pass takes its share of the free leases, as liveness per instance
// would have at its own pass. If the beat moved, the notice is forgotten.
// At rest there are no notices: a pass reads the version and the watched
// entries, as before. The suspect's watchers (its ring predecessors,
// counted with it) withdraw a notice once its entry shows another beat, is
// declared dead or is gone (tendNotices), so that a notice whose poster
// died does not outlive the suspect's next watcher's pass.
//
// Members of an earlier version (no lease.Member.Roster) neither bump nor
// declare: while the last full read showed one, every pass reads the
// whole list, as before; one that joins later is seen at the next bump or
// sweep.

// rosterK is how many ring successors each owner watches.
const rosterK = 2

// rosterWhole is the default of Config.RosterWhole: the members whose
// items fit in about one read unit (4 KB), no dearer than the version and
// rosterK entries.
const rosterWhole = 48

// rosterSweep is the longest time between two full reads of the members
// with the roster: for members of an earlier version that joined since
// (they bump nothing).
func (cfg *Config) rosterSweep() time.Duration { return 30 * cfg.Failover }

// rosterState is what an owner knows of the roster. The read side is
// guarded by mu; the heartbeat side (rejoin, owed, wrote) by beatSem.
type rosterState struct {
	mu     sync.Mutex
	valid  bool                    // a full read was made
	ver    int64                   // the version that full read followed
	fullAt time.Time               // when it was sent
	cache  map[string]lease.Member // its entries, the watched ones as last read
	old    bool                    // it showed a member of an earlier version

	rejoin bool   // the entry was declared dead: the next heartbeat writes a new one
	owed   bool   // a bump is owed (a rejoin, a bump that failed)
	wrote  string // what the others read of the last entry bumped for
	// passBump: the entry changed; the next pass bumps the roster.
	passBump atomic.Bool
	armed    map[string]int64 // member -> beat a declaration check is armed for (armDeclare; under mu)
	// declared: members this owner declared dead whose free leases its
	// next listing pass takes, all of them (takeDeclared; under mu).
	declared map[string]int64
	// heard: the members a watcher's notice named (lease.RosterNotice),
	// with the beat it named and the earliest moment, on this owner's
	// clock, one of their notices fell due (hear; under mu).
	heard map[string]heardNotice
	// onItem: the notices the last read of the version item showed
	// (tendNotices withdraws those resolved; under mu).
	onItem []lease.RosterNotice
}

// heardNotice is what a pass knows of a notice of a member's: the beat
// it named and when its death falls due on this owner's clock.
type heardNotice struct {
	beat int64
	due  time.Time
}

// checkRoster runs at Start, before any heartbeat: it turns the roster
// off for this coordinator when the store turns out not to keep it after
// all (its tables checked: the members table missing or out of reach
// leaves the entries in one item) or refuses its calls for want of
// permission (an IAM policy from before the roster, which needs
// dynamodb:BatchGetItem and dynamodb:UpdateItem on the members table): a
// roster whose calls fail would fence this instance at every pass, where
// liveness per instance without it only reads more. Instances with and
// without the roster share a table, so the others need not know. The
// probe writes nothing: a declaration of this owner at a beat it never
// had is refused by its condition (lease.ErrLeaseLost) when allowed.
func (c *Coordinator) checkRoster(ctx context.Context) {
	if c.roster == nil {
		return
	}
	off := func(why string, attrs ...any) {
		c.log.Warn("members roster off: "+why, attrs...)
		c.roster, c.notices = nil, nil
	}
	if _, ok := lease.RosterOf(c.rosterRaw); !ok {
		off("the lease store keeps no roster (the members in one item)")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.leaseCallTimeout())
	defer cancel()
	_, _, err := c.roster.MembersByOwner(ctx, c.cfg.Namespace, []string{c.cfg.Owner})
	if err == nil {
		err = c.roster.DeclareDead(ctx, c.cfg.Namespace, c.cfg.Owner, -1)
		if errors.Is(err, lease.ErrLeaseLost) {
			err = nil
		}
	}
	if accessDenied(err) {
		off("the lease store refused its calls; grant dynamodb:BatchGetItem and dynamodb:UpdateItem on the members table (docs/instances.md, IAM permissions)", "err", err)
	}
}

// readRoster reads the members with the roster: the whole list, or the
// watched entries over the last full read (read: the owners read now).
// sent is when the read the view is judged by was sent: the full read,
// or the one call that read the version and the watched entries (so a
// view is never older than one call: balance).
func (c *Coordinator) readRoster(ctx context.Context) (ms []lease.Member, read map[string]bool, sent time.Time, err error) {
	rs := &c.rs
	rs.mu.Lock()
	small := rs.valid && len(rs.cache) <= c.cfg.RosterWhole
	watching := rs.valid && !small && !rs.old && time.Since(rs.fullAt) < c.cfg.rosterSweep()
	cache, known := rs.cache, rs.ver
	rs.mu.Unlock()
	ver := int64(-1) // small: no version read, and the next read that is not is full
	if watching {
		sent = time.Now()
		watch := ringSuccessors(c.cfg.Owner, cache, rosterK)
		watch = append(watch, c.dueSuspects(sent, watch)...)
		v, got, notices, err := c.watchRoster(ctx, watch)
		if err != nil {
			return nil, nil, sent, err
		}
		c.hear(notices, cache, time.Now())
		if v == known {
			next := maps.Clone(cache)
			for _, o := range watch {
				delete(next, o) // gone, unless read now (a leave bumps: the next read is full)
			}
			read = make(map[string]bool, len(got))
			for _, m := range got {
				next[m.Owner], read[m.Owner] = m, true
			}
			rs.mu.Lock()
			if rs.ver == known && rs.valid {
				rs.cache = next
			}
			rs.mu.Unlock()
			ms = slices.Collect(maps.Values(next))
			slices.SortFunc(ms, func(a, b lease.Member) int { return strings.Compare(a.Owner, b.Owner) })
			return ms, read, sent, nil
		}
		ver = v // moved: read the whole list
	} else if !small {
		v, err := c.roster.RosterVersion(ctx, c.cfg.Namespace)
		if err != nil {
			return nil, nil, time.Now(), err
		}
		ver = v
	}
	sent = time.Now()
	ms, err = c.members.Members(ctx, c.cfg.Namespace)
	if err != nil {
		return nil, nil, sent, err
	}
	next := make(map[string]lease.Member, len(ms))
	old := false
	for _, m := range ms {
		next[m.Owner] = m
		old = old || !m.Roster
	}
	rs.mu.Lock()
	rs.valid, rs.ver, rs.fullAt, rs.cache, rs.old = true, ver, sent, next, old
	rs.mu.Unlock()
	return ms, nil, sent, nil
}

// watchRoster reads the version and the watched entries, and the notices
// on the version item when the store keeps them (lease.RosterNotices).
func (c *Coordinator) watchRoster(ctx context.Context, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	if c.notices != nil {
		return c.notices.WatchRoster(ctx, c.cfg.Namespace, owners)
	}
	v, ms, err := c.roster.MembersByOwner(ctx, c.cfg.Namespace, owners)
	return v, ms, nil, err
}

// ringSuccessors returns the k owners after me on the ring of roster
// members not declared dead, sorted by owner (me in it whether listed or
// not).
func ringSuccessors(me string, entries map[string]lease.Member, k int) []string {
	return ringSuccessorsWith(me, entries, k, "")
}

// ringSuccessorsWith is ringSuccessors with also on the ring too (when
// not empty), whatever its entry says.
func ringSuccessorsWith(me string, entries map[string]lease.Member, k int, also string) []string {
	ring := []string{me}
	if also != "" && also != me {
		ring = append(ring, also)
	}
	for o, m := range entries {
		if o != me && o != also && m.Roster && !m.Dead {
			ring = append(ring, o)
		}
	}
	slices.Sort(ring)
	i := slices.Index(ring, me)
	var out []string
	for j := 1; j <= k && j < len(ring); j++ {
		out = append(out, ring[(i+j)%len(ring)])
	}
	return out
}

// declareDead declares dead, with the roster, the roster members of v
// that this owner watches (its ring successors) and that v counts dead by
// their beat or their own word (Fenced), and bumps the roster once if it
// declared any.
func (c *Coordinator) declareDead(ctx context.Context, v memberView) {
	if c.roster == nil {
		return
	}
	declared := false
	for _, o := range ringSuccessors(c.cfg.Owner, v.all, rosterK) {
		m := v.all[o]
		if m.Dead || !m.Roster || (v.read != nil && !v.read[o]) {
			continue
		}
		if v.live[o] {
			c.armDeclare(o, m.Beat)
			continue
		}
		if err := c.roster.DeclareDead(ctx, c.cfg.Namespace, o, m.Beat); err != nil {
			if !errors.Is(err, lease.ErrLeaseLost) {
				c.log.Warn("declaring a member dead failed", "member", o, "err", err)
			}
			continue
		}
		c.log.Info("member declared dead", "member", o, "beat", m.Beat, "fenced", m.Fenced)
		c.noteDeclared(o, m.Beat)
		declared = true
	}
	if declared {
		c.bumpRoster(ctx)
	}
}

// armDeclare, for a watched successor whose beat will have stood still
// for the failover time before this owner's next pass, reads its entry
// again at that moment and declares it dead if it still has (declareAt);
// while the others read the watched entries only (noticing), it posts a
// notice noticeLead before that moment too (notice), so that they act on
// the death when it falls due and not at their next pass after the
// declaration. One check per member and beat.
func (c *Coordinator) armDeclare(o string, beat int64) {
	at, ok := c.beats.staleAt(lease.Lease{Key: o, Owner: o, Counter: beat}, c.cfg.Failover)
	notify := c.notices != nil && c.noticing()
	window := c.cfg.leaseEvery()
	if notify {
		window += c.cfg.noticeLead()
	}
	if !ok || time.Until(at) >= window {
		return
	}
	c.rs.mu.Lock()
	if c.rs.armed == nil {
		c.rs.armed = map[string]int64{}
	}
	if c.rs.armed[o] == beat {
		c.rs.mu.Unlock()
		return
	}
	c.rs.armed[o] = beat
	c.rs.mu.Unlock()
	c.goLoop(func(ctx context.Context) {
		if notify && !c.notice(ctx, o, beat, at) {
			return
		}
		if !sleep(ctx, time.Until(at)) {
			return
		}
		c.declareAt(ctx, o)
	})
}

// noticeLead is how long before a death falls due its watchers post their
// notice: a lease pass, so that every instance reads it at its last pass
// before that moment, and a fiftieth of one more (50 ms at the default
// timing), so that it lands before that pass when passes run in step
// (instances started together): each reader's due moment is then that
// much after the watcher's, where a declaration read at the next pass
// lags a pass.
func (cfg *Config) noticeLead() time.Duration { return cfg.leaseEvery() + cfg.leaseEvery()/50 }

// noticing reports whether the others read the version item every pass
// (this owner's last full read showed more than RosterWhole members, all
// keeping the roster): a notice reaches them.
func (c *Coordinator) noticing() bool {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	return c.rs.valid && !c.rs.old && len(c.rs.cache) > c.cfg.RosterWhole
}

// noticeRefreshes is how many times a watcher posts its notice of a
// death in the last pass before it falls due, evenly spaced: a reader
// counts the due moment from when its read of the latest one returned,
// so that it lags the watcher's by at most the spacing (a pass over this)
// when passes are out of step, instead of up to a pass.
const noticeRefreshes = 4

// notice waits until noticeLead before at, reads o's entry by key and,
// while it still shows beat (not fenced: then it is declared at once),
// posts this owner's notice of it, noticeRefreshes times a pass apart
// over noticeRefreshes, each with the time left then. It reports whether
// o may still fall due at at (its beat has not moved, and it has neither
// left nor been declared).
func (c *Coordinator) notice(ctx context.Context, o string, beat int64, at time.Time) bool {
	lead := c.cfg.noticeLead()
	if !sleep(ctx, time.Until(at.Add(-lead))) {
		return false
	}
	_, ms, err := c.roster.MembersByOwner(ctx, c.cfg.Namespace, []string{o})
	switch {
	case err != nil:
		return true // declareAt reads it again
	case len(ms) == 0 || ms[0].Dead || ms[0].Beat != beat:
		return false
	case ms[0].Fenced:
		return true
	}
	every := c.cfg.leaseEvery() / noticeRefreshes
	for i := range noticeRefreshes {
		if !sleep(ctx, time.Until(at.Add(-lead+time.Duration(i)*every))) {
			return false
		}
		due := time.Until(at)
		if due <= 0 {
			break
		}
		n := lease.RosterNotice{Owner: o, By: c.cfg.Owner, Beat: beat, Due: due}
		if err := c.notices.PostNotice(ctx, c.cfg.Namespace, n); err != nil {
			c.log.Warn("posting a roster notice failed", "member", o, "err", err)
		} else if i == 0 {
			c.log.Info("roster notice posted", "member", o, "beat", beat, "due", due)
		}
	}
	return true
}

// hear takes in the notices a read of the version item returned at
// (when it returned: after each was sent), and wakes a pass when each
// falls due. A notice of this owner, of a member the last full read
// showed declared dead or did not show, or of an earlier beat than one
// heard is left; of a beat heard already, the earlier due moment counts.
func (c *Coordinator) hear(notices []lease.RosterNotice, cache map[string]lease.Member, at time.Time) {
	var wakes []time.Time
	c.rs.mu.Lock()
	c.rs.onItem = notices
	for _, n := range notices {
		m, ok := cache[n.Owner]
		if n.Owner == c.cfg.Owner || !ok || m.Dead {
			continue
		}
		due := at.Add(n.Due)
		h, ok := c.rs.heard[n.Owner]
		if ok && (h.beat > n.Beat || h.beat == n.Beat && !due.Before(h.due)) {
			continue
		}
		if c.rs.heard == nil {
			c.rs.heard = map[string]heardNotice{}
		}
		c.rs.heard[n.Owner] = heardNotice{beat: n.Beat, due: due}
		wakes = append(wakes, due)
	}
	c.rs.mu.Unlock()
	for _, due := range wakes {
		c.wakeAt(due)
	}
}

// wakeAt wakes a pass at t.
func (c *Coordinator) wakeAt(t time.Time) {
	c.goLoop(func(ctx context.Context) {
		if sleep(ctx, time.Until(t)) {
			c.wake(false)
		}
	})
}

// goLoop runs f on a goroutine of the coordinator's loops (Stop waits for
// it), under the loops' context; not once the coordinator has stopped.
func (c *Coordinator) goLoop(f func(ctx context.Context)) {
	c.mu.Lock()
	ctx := c.ctx
	c.mu.Unlock()
	if ctx == nil {
		return
	}
	c.loops.Add(1)
	go func() {
		defer c.loops.Done()
		f(ctx)
	}()
}

// dueSuspects returns the members whose notices fell due by sent, not in
// watch: a pass reads their entries by key with the watched ones.
func (c *Coordinator) dueSuspects(sent time.Time, watch []string) []string {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	var out []string
	for o, h := range c.rs.heard {
		if !sent.Before(h.due) && !slices.Contains(watch, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// noticeFell reports whether a notice of m's heard by this owner fell due
// by sent, the time the read that shows m was sent, and m's beat is still
// the one it named: the beat stood still for the failover time up to then
// on its watcher's clock (hear), so m is dead, as if this owner had
// watched it.
func (c *Coordinator) noticeFell(m lease.Member, sent time.Time) bool {
	if c.notices == nil {
		return false
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	h, ok := c.rs.heard[m.Owner]
	return ok && h.beat == m.Beat && !sent.Before(h.due)
}

// tendNotices, after a pass read the members (v), forgets the notices
// heard whose member v shows with another beat, declared dead or gone,
// and withdraws those on the version item that this owner watches the
// member of (it is among the member's ring predecessors, counted with
// the member) and that v shows resolved so.
func (c *Coordinator) tendNotices(ctx context.Context, v memberView) {
	if c.notices == nil {
		return
	}
	resolved := func(o string, beat int64) bool {
		m, ok := v.all[o]
		return !ok || m.Dead || (v.read == nil || v.read[o]) && m.Beat != beat
	}
	var withdraw []lease.RosterNotice
	c.rs.mu.Lock()
	for o, h := range c.rs.heard {
		if resolved(o, h.beat) {
			delete(c.rs.heard, o)
		}
	}
	keep := c.rs.onItem[:0:0]
	for _, n := range c.rs.onItem {
		if resolved(n.Owner, n.Beat) && slices.Contains(ringSuccessorsWith(c.cfg.Owner, v.all, rosterK, n.Owner), n.Owner) {
			withdraw = append(withdraw, n)
			continue
		}
		keep = append(keep, n)
	}
	c.rs.onItem = keep
	c.rs.mu.Unlock()
	for _, n := range withdraw {
		if err := c.notices.WithdrawNotice(ctx, c.cfg.Namespace, n); err != nil {
			c.log.Warn("withdrawing a roster notice failed", "member", n.Owner, "by", n.By, "err", err)
		}
	}
}

// declareAt reads o's entry and declares it dead when its beat has stood
// still for the failover time (or it says it is fenced).
func (c *Coordinator) declareAt(ctx context.Context, o string) {
	sent := time.Now()
	_, ms, err := c.roster.MembersByOwner(ctx, c.cfg.Namespace, []string{o})
	if err != nil || len(ms) == 0 || ms[0].Dead {
		return
	}
	m := ms[0]
	l := lease.Lease{Key: o, Owner: o, Counter: m.Beat}
	c.beats.observeSome([]lease.Lease{l}, time.Now())
	if !m.Fenced && !c.beats.stale(l, sent, c.cfg.Failover) {
		return
	}
	if err := c.roster.DeclareDead(ctx, c.cfg.Namespace, o, m.Beat); err != nil {
		return
	}
	c.log.Info("member declared dead", "member", o, "beat", m.Beat, "fenced", m.Fenced)
	c.noteDeclared(o, m.Beat)
	c.bumpRoster(ctx)
	c.wake(false)
}

// noteDeclared records that this owner declared o dead at beat: its next
// listing pass takes every free lease of o's (takeDeclared).
func (c *Coordinator) noteDeclared(o string, beat int64) {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	if c.rs.declared == nil {
		c.rs.declared = map[string]int64{}
	}
	c.rs.declared[o] = beat
}

// declaredPending reports whether a member this owner declared dead
// waits for its leases to be taken (the pass lists: mustList).
func (c *Coordinator) declaredPending() bool {
	if c.roster == nil {
		return false
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	return len(c.rs.declared) > 0
}

// takeDeclarations returns the members this owner declared dead since
// the last listing pass (noteDeclared) and forgets them: that pass takes
// their free leases (takeDeclared).
func (c *Coordinator) takeDeclarations() map[string]int64 {
	if c.roster == nil {
		return nil
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	declared := c.rs.declared
	c.rs.declared = nil
	return declared
}

// takeDeclared adds to plan's takes the free leases (plan.spare: judged
// expired by the view, as any take) of the members declared dead
// (takeDeclarations), up to the fair share's ceiling (ceil of the active
// leases over the live members); mine is what this owner holds. The
// others learn of a declaration only at their next pass after the bump,
// up to a lease pass
// after each would have judged the death by itself (liveness per
// instance); the declarer, whose judgement falls due first, takes what it
// can keep without another move: at most one lease over its floor, which
// the fair share leaves it (shares: the most loaded keep the remainder).
// Taking them all would read them again sooner but move the surplus a
// second time by handoff (measured: twice the minimum owner changes at
// 1,000 shards on 20 and 200 instances). A member the view judges alive
// again (back with a new beat) has no free lease to take.
func takeDeclared(plan *balance, declared map[string]int64, view memberView, leases []lease.Lease, mine int) {
	if len(declared) == 0 || len(view.live) == 0 {
		return
	}
	active := 0
	for _, l := range leases {
		if l.Checkpoint != lease.CheckpointShardEnd {
			active++
		}
	}
	ceil := (active + len(view.live) - 1) / len(view.live)
	mine += len(plan.take)
	var spare []lease.Lease
	for _, l := range plan.spare {
		if _, ok := declared[l.Owner]; ok && l.Owner != "" && !view.live[l.Owner] && mine < ceil {
			plan.take = append(plan.take, l)
			mine++
			continue
		}
		spare = append(spare, l)
	}
	plan.spare = spare
}

// bumpRoster bumps the roster's version, with the roster (a leave, a
// removal, a declaration: the others read the whole list again).
func (c *Coordinator) bumpRoster(ctx context.Context) {
	if c.roster == nil {
		return
	}
	if _, err := c.roster.BumpRoster(ctx, c.cfg.Namespace); err != nil {
		c.log.Warn("roster bump failed", "err", err)
	}
}

// bumpLoop (with the roster, beside heartLoop) bumps the roster for an
// entry's change a heartbeat wrote (passBump), off the heartbeat's path;
// one that fails is left to the next pass (passMembers).
func (c *Coordinator) bumpLoop() {
	defer c.beating.Done()
	for {
		select {
		case <-c.beatCtx.Done():
			return
		case <-c.bumpKick:
		}
		if !c.rs.passBump.Swap(false) {
			continue // bumped by a pass meanwhile
		}
		ctx, cancel := context.WithTimeout(c.beatCtx, c.cfg.leaseCallTimeout())
		_, err := c.roster.BumpRoster(ctx, c.cfg.Namespace)
		cancel()
		if err != nil {
			c.rs.passBump.Store(true)
			if c.beatCtx.Err() == nil {
				c.log.Warn("roster bump failed; the next pass bumps", "err", err)
			}
		}
	}
}
