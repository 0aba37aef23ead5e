package shard

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// owned is a lease this coordinator holds and, once the shard's parents are
// finished, the reader session that reads it.
type owned struct {
	shard, key string

	// mu serialises every store mutation of the lease (each bumps its
	// counter, so two in flight would fence each other) and guards the rest.
	mu sync.Mutex
	// state is where the lease is in its life (state.go), written only by
	// the transitions there.
	state     atomic.Int32
	l         lease.Lease
	sess      *session  // the current reader generation, nil until started
	persisted uint64    // sess.wm version last written to the store
	wrote     time.Time // send time of the last successful mutation: it renewed the lease from then
	// log reports illegal state moves (state.go); nil: the default.
	log *slog.Logger
	// stuck is the first unsettled record of the last postponed handoff,
	// in generation stuckIn: while it is still the first, a new request is
	// postponed at once, without stopping the reader again (startHandoff).
	stuck   *mark
	stuckIn *watermark
	// releaseSent: a release of this lease was sent and may have landed
	// with its answer lost (a call past its deadline), so a later write
	// that finds the lease free, or its asker's, finds it released, not
	// lost (releaseLanded).
	releaseSent bool

	// The self-fence (issue 9, scenario 3). until is when the lease may
	// look expired to another instance, less a margin: the send time of
	// the last successful write plus fenceAfter, on this process's
	// monotonic clock (nanoseconds since the coordinator's epoch). The
	// timer fires then; unless a write moved until meanwhile, the lease
	// is fenced: fctx ends, which stops its reader and abandons its
	// delivered records at once, without waiting for mu (a write may be
	// stuck holding it), and the lease is forgotten. Only a new Take wins
	// it back.
	until  atomic.Int64
	timer  *time.Timer
	fctx   context.Context
	fencer context.CancelFunc
	lctx   *leaseCtx // the handlers' view of fctx (Record.Lease)

	// For Status, which must not wait for mu (a write in flight holds it
	// across a store call): the shard's counters, and mirrors of sess (for
	// the records in flight) and of the lease's PendingOwner, each set
	// together with its field. The state needs none: it is atomic.
	st       *Stats
	sessionA atomic.Pointer[session]
	asked    atomic.Pointer[string]
}

// setLease sets o.l, as stored at when (zero: as listed); o.mu is held (or
// o is new).
func (o *owned) setLease(l lease.Lease, when time.Time) {
	o.l = l
	if l.Checkpoint != "" {
		o.st.checkpointed(l.Checkpoint, l.SubSequence, when)
	}
	if p := o.asked.Load(); (p == nil) != (l.PendingOwner == "") || p != nil && *p != l.PendingOwner {
		if l.PendingOwner == "" {
			o.asked.Store(nil)
		} else {
			o.asked.Store(&l.PendingOwner)
		}
	}
}

// askedBy returns the owner that asked for the lease, if any.
func (o *owned) askedBy() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.PendingOwner
}

// session is one reader generation: a seek or a lease loss abandons its
// watermark, so its records can never move a checkpoint.
type session struct {
	wm *watermark
	// from is where the session opened, as a position a later iterator
	// reaches again: for an opening at Latest, the time pin of it (see
	// pinLatest). The reader reopens there if its iterator expires before
	// it delivered a record; the lease holds it until a record settles.
	from startAt
	// pin is from, still to be written to the lease (its first write
	// failed); guarded by owned.mu.
	pin    *startAt
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader goroutine has returned
}

func (o *owned) session() *session {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sess
}

var (
	// errGone: the lease is no longer held here (lost, released, deleted).
	errGone = errors.New("lease no longer held")
	// errNothing: a checkpoint found no new progress to write.
	errNothing = errors.New("nothing to write")
)

// mutate runs op on the held lease under o.mu. A counter that moved while
// the stored owner is still this one (a RequestHandoff bumps it) is adopted
// and op retried; any other owner, or no lease at all, means the lease is
// lost: the reader stops at once and its unsettled records are abandoned.
func (c *Coordinator) mutate(ctx context.Context, o *owned, op string, f func(lease.Lease) (lease.Lease, error)) (lease.Lease, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if !o.stateNow().held() {
			return lease.Lease{}, errGone
		}
		sent := time.Now()
		l, err := f(o.l)
		if err == nil {
			o.wrote = sent
			o.setLease(l, time.Now())
			c.renewed(o, sent)
			return l, nil
		}
		if !errors.Is(err, lease.ErrLeaseLost) || attempt == 3 {
			if errors.Is(err, errNothing) {
				return o.l, err
			}
			return lease.Lease{}, &Error{Op: op, Stream: c.cfg.Stream, Shard: o.shard, Err: err}
		}
		cur, gerr := c.cfg.Leases.Get(ctx, o.key)
		switch {
		case errors.Is(gerr, lease.ErrNotFound):
			c.letGoOf(o.shard, math.MaxInt64)
			c.loseLocked(o, "")
			return lease.Lease{}, errGone
		case gerr != nil:
			return lease.Lease{}, &Error{Op: "lease get", Stream: c.cfg.Stream, Shard: o.shard, Err: gerr}
		case cur.Owner != c.cfg.Owner:
			c.letGoOf(o.shard, cur.Counter)
			if releaseLanded(o, cur) {
				c.releasedLocked(o)
			} else {
				c.loseLocked(o, cur.Owner)
			}
			return lease.Lease{}, errGone
		}
		o.setLease(cur, time.Time{})
	}
}

// loseLocked fences a lost lease: the reader stops fetching at once and its
// delivered, unsettled records are dropped (the new owner reads them again).
// It is counted lost before it leaves Owned, so that whoever sees it gone
// there finds it counted.
func (c *Coordinator) loseLocked(o *owned, to string) {
	c.cfg.Counters.Lost.Add(1)
	o.drop("lost")
	c.forget(o)
	c.log.Warn("lease lost; reader stopped", "shard", o.shard, "new_owner", to)
}

// releaseLanded reports whether cur, read after a write of o found the
// lease moved on, shows a release this owner sent as landed with its
// answer lost: the lease free, or taken by the owner it was released to.
// (Sent again, or followed by a renewal, such a release would otherwise
// count as a lease lost: a false alarm at every deploy on a slow store.)
func releaseLanded(o *owned, cur lease.Lease) bool {
	return o.releaseSent && (cur.Owner == "" || o.l.PendingOwner != "" && cur.Owner == o.l.PendingOwner)
}

// releasedLocked ends o as released, its release found landed after its
// answer was lost (releaseLanded): a handoff's counts as handed over.
func (c *Coordinator) releasedLocked(o *owned) {
	if o.stateNow() == stReleasing {
		c.cfg.Counters.HandedOver.Add(1)
	}
	o.drop("released")
	c.forget(o)
	c.log.Debug("lease found released: a release's answer was lost", "shard", o.shard)
}

// letGoOf records that this owner let the lease of shard go, as the store
// had it at counter (see Coordinator.letGo).
func (c *Coordinator) letGoOf(shard string, counter int64) {
	c.mu.Lock()
	c.letGo[shard] = max(c.letGo[shard], counter)
	delete(c.fenced, shard)
	c.mu.Unlock()
}

// forgetFenced drops shard from the leases fenced here: it no longer names
// this owner.
func (c *Coordinator) forgetFenced(shard string) {
	c.mu.Lock()
	delete(c.fenced, shard)
	c.mu.Unlock()
}

// forget drops o from the held leases.
func (c *Coordinator) forget(o *owned) {
	c.mu.Lock()
	if c.owned[o.shard] == o {
		delete(c.owned, o.shard)
	}
	c.mu.Unlock()
	o.timer.Stop()
	o.fencer() // its sessions are stopped and abandoned already
}

// overdueAfter is how long a lease planned free for another member may
// stay free before this one takes it (takeOverdue), and how long the
// members' counts may hold fewer leases than known before an owner at its
// share lists (mustList): together past the planned taker's own judging
// (up to a quarter of Failover later than this owner's) and a pass or two.
func (cfg *Config) overdueAfter() time.Duration { return cfg.Failover / 2 }

// fenceMargin is how much earlier than the failover time an owner that
// could not renew a lease stops using it. Another instance takes the lease
// at the earliest the failover time after it first saw the last write,
// which was sent after the write this owner counts from; the margin covers
// clock-rate drift between hosts and the moment the fence needs to stop the
// reader. It is a fifth of the failover time, and at most half the time
// from one renewal to the failover time, so that one failed renewal never
// fences.
func (cfg *Config) fenceAfter() time.Duration {
	return cfg.Failover - min(cfg.Failover/5, (cfg.Failover-cfg.Renew)/2)
}

// renewed moves o's fence to the failover time (less the margin) after
// sent, the time a successful write was sent; o.mu is held (or o is new).
// It only ever moves the fence later: a heartbeat and a lease write may
// land in either order.
//
// With liveness per instance the others judge this owner by its member
// entry alone, never by a lease's counter: a lease write (a take, a
// checkpoint) then moves the fence no later than the last heartbeat's.
func (c *Coordinator) renewed(o *owned, sent time.Time) {
	until := int64(sent.Sub(c.epoch) + c.cfg.fenceAfter())
	if c.members != nil {
		until = min(until, c.beatUntil.Load())
	}
	now := int64(time.Since(c.epoch))
	for {
		cur := o.until.Load()
		if until <= cur {
			return
		}
		if cur != 0 && now >= cur {
			// Past its fence already: the lease is fenced by the clock
			// (Record.Stale says so), whether or not the timer has run;
			// a renewal answered after a pause must not revive it.
			return
		}
		if o.until.CompareAndSwap(cur, until) {
			break
		}
	}
	o.timer.Reset(time.Duration(until) - time.Since(c.epoch))
}

// leaseCtx is a lease's context as its handlers see it (Record.Lease):
// done when the lease is lost, fenced or released, and, by the monotonic
// clock, as soon as the lease is past its fence: after a pause the fence's
// timer may run after a thawed handler looks (issue 29, defect 5). The
// first Err past the fence closes Done. Deadline is the current fence.
type leaseCtx struct {
	context.Context // ends with fctx, or at the first Err past the fence
	cancel          context.CancelFunc
	until           *atomic.Int64 // owned.until
	epoch           time.Time
}

func newLeaseCtx(fctx context.Context, until *atomic.Int64, epoch time.Time) *leaseCtx {
	ctx, cancel := context.WithCancel(fctx)
	return &leaseCtx{Context: ctx, cancel: cancel, until: until, epoch: epoch}
}

func (l *leaseCtx) Deadline() (time.Time, bool) {
	return l.epoch.Add(time.Duration(l.until.Load())), true
}

func (l *leaseCtx) Err() error {
	if err := l.Context.Err(); err != nil {
		return err
	}
	if time.Since(l.epoch) >= time.Duration(l.until.Load()) {
		l.cancel()
		return l.Context.Err()
	}
	return nil
}

// fenceLeft is how long until o is past its fence by the monotonic clock.
func (c *Coordinator) fenceLeft(o *owned) time.Duration {
	return time.Duration(o.until.Load()) - time.Since(c.epoch)
}

// fenceLate delays every fence's timer callback (nanoseconds; tests only,
// export_test.go): after a pause the timers may run after the lanes and
// readers have resumed, which a test cannot otherwise arrange.
var fenceLate atomic.Int64

// fenceIfExpired fences o when its fence time has passed without a
// successful write: the owner can no longer be sure nobody else has taken
// the lease, so it stops handing out the shard's records and writes
// nothing more for it, as the KCL does with a lease it could not renew.
// The records it handed out may finish; their settlements count for
// nothing. The lease still names this owner, so the next pass lists
// (leftBehind) and takes it back (its reader then starts over from the
// checkpoint) or releases it (takeBack, releaseLeftovers).
func (c *Coordinator) fenceIfExpired(o *owned) {
	if d := fenceLate.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if o.fctx.Err() != nil {
		return // released or lost already
	}
	if left := c.fenceLeft(o); left > 0 {
		// Renewed meanwhile: two renewals may have reset the timer in
		// the other order, so set it again for the later fence.
		o.timer.Reset(left)
		return
	}
	o.fence()
	o.fencer()
	c.log.Warn("lease not renewed in time: reader fenced, its records left to the next owner", "shard", o.shard,
		"failover", c.cfg.Failover)
	c.mu.Lock()
	if c.drained { // Stop is past its final writes: nothing more to forget
		c.mu.Unlock()
		return
	}
	c.workers.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.workers.Done()
		o.mu.Lock() // after a write in flight has returned: bounded by its deadline
		defer o.mu.Unlock()
		if o.stateNow() != stGone {
			o.drop("fenced")
			f := c.fencedOf(o)
			c.mu.Lock()
			c.fences++ // still in this owner's name: leftBehind
			c.fenced[o.shard] = f
			c.mu.Unlock()
			c.forget(o)
			c.cfg.Counters.Lost.Add(1)
		}
		c.wake(false) // a pass may win it back
	}()
}

// fencedLease is a lease this owner fenced and forgot (Coordinator.fenced):
// its key, the reader generation the fence abandoned (nil: none), and
// when the others may take it, a failover time after the write that
// renewed it last (expires).
type fencedLease struct {
	key     string
	gen     *watermark
	expires time.Time
}

// fencedOf is the fencedLease of o, fenced; o.mu is held.
func (c *Coordinator) fencedOf(o *owned) fencedLease {
	f := fencedLease{key: o.key}
	if o.sess != nil {
		f.gen = o.sess.wm
	}
	// The fence is fenceAfter past the last renewal's send.
	f.expires = c.epoch.Add(time.Duration(o.until.Load()) + c.cfg.Failover - c.cfg.fenceAfter())
	return f
}

// fencedRunning reports whether the lease of shard was fenced here while a
// handler ran one of its records, that handler has not returned, and the
// lease has not expired to the others yet. Taking it back then would read
// the record again beside that handler (at once, in this process), and
// releasing it would let another owner do so, before the failover time
// that the fence keeps for a crash (fenceAfter): passes count it as held
// meanwhile (heldKeys), so none takes it back, releases it or plans to
// take it, and a pass tries again (leftBehind lists while the lease names
// this owner). A handler deaf to its cancelled context holds the shard
// no longer than a crash would: once the lease has expired, or the
// handlers have returned, it forgets the generation. c.mu is held.
func (c *Coordinator) fencedRunning(shard string) bool {
	f, ok := c.fenced[shard]
	if !ok || f.gen == nil {
		return false
	}
	if f.running() {
		return true
	}
	f.gen = nil
	c.fenced[shard] = f
	return false
}

// running reports whether a handler still runs a record of f's generation
// before f has expired to the others.
func (f fencedLease) running() bool {
	return f.gen != nil && time.Now().Before(f.expires) && f.gen.inHandlers()
}

// persist writes the current session's settled progress when it moved.
// final is set when the lease is about to be released and its reader has
// stopped (Stop, handoff): then a session that settled nothing but has
// records out writes the first of them ("at" it: SubSequence one less
// skips nothing of it), unless the lease already holds a sequence number
// at or before it, so the next owner reads them again.
func (c *Coordinator) persist(ctx context.Context, o *owned, final bool) error {
	_, err := c.mutate(ctx, o, "lease checkpoint", func(l lease.Lease) (lease.Lease, error) {
		s := o.sess
		if s == nil || o.ended() || s.wm.discard.Load() {
			return l, errNothing
		}
		m, ok, version := s.wm.progress()
		switch {
		case ok && version != o.persisted:
			nl, err := c.cfg.Leases.Checkpoint(ctx, l, m.seq, m.sub)
			if err == nil {
				o.persisted, s.pin = version, nil
			}
			return nl, err
		case ok:
			return l, errNothing
		}
		if first, out := s.wm.firstPending(); out && final && !isSequence(l.Checkpoint) {
			return c.cfg.Leases.Checkpoint(ctx, l, first.seq, first.sub-1)
		}
		if s.pin != nil {
			nl, err := c.writePin(ctx, l, *s.pin)
			if err == nil {
				s.pin = nil
			}
			return nl, err
		}
		return l, errNothing
	})
	if errors.Is(err, errNothing) || errors.Is(err, errGone) {
		return nil
	}
	return err
}

// persistFinal is persist(final), written again while it fails and ctx
// lasts: a lease released after a failed final checkpoint sends the next
// owner back to the last one written, and a graceful handoff or stop must
// not deliver records twice for one failed call.
func (c *Coordinator) persistFinal(ctx context.Context, o *owned) error {
	return c.retryWrite(ctx, 0, "final checkpoint", o.shard, "final checkpoint failed; retrying",
		func() error { return c.persist(ctx, o, true) })
}

// retryWrite runs write until it succeeds or fails as invalid (which
// retrying cannot mend), while ctx lasts and, with tries above 0, at most
// tries times; each failure it tries again after is logged as msg, and
// waited out with a backoff whose jitter site (and shard) names.
func (c *Coordinator) retryWrite(ctx context.Context, tries int, site, shard, msg string, write func() error) error {
	bo := backoff{base: 50 * time.Millisecond, max: time.Second, site: site, shard: shard}
	for try := 1; ; try++ {
		err := write()
		if err == nil || errors.Is(err, lease.ErrInvalid) || try == tries {
			return err
		}
		if shard != "" {
			c.log.Warn(msg, "shard", shard, "err", err)
		} else {
			c.log.Warn(msg, "err", err)
		}
		if !sleep(ctx, bo.next()) {
			return err
		}
	}
}

// isSequence reports whether a checkpoint is a sequence number (not one of
// the Checkpoint* constants, nor empty).
func isSequence(cp string) bool {
	switch cp {
	case "", lease.CheckpointTrimHorizon, lease.CheckpointLatest, lease.CheckpointAtTimestamp, lease.CheckpointShardEnd:
		return false
	}
	return true
}

// release gives the lease up so another instance can take it at once.
// Records still unsettled are abandoned: their settlement can no longer be
// written, and the next owner reads them again from the checkpoint.
func (c *Coordinator) release(ctx context.Context, o *owned) error {
	_, err := c.releaseLease(ctx, o)
	return err
}

// releaseLease is release; released reports that this call released the
// lease (not that it was gone already).
func (c *Coordinator) releaseLease(ctx context.Context, o *owned) (released bool, err error) {
	_, err = c.mutate(ctx, o, "lease release", func(l lease.Lease) (lease.Lease, error) {
		o.releaseSent = true
		nl, err := c.cfg.Leases.Release(ctx, l)
		if err == nil {
			c.letGoOf(o.shard, nl.Counter)
			o.drop("released")
		}
		return nl, err
	})
	if err == nil {
		c.forget(o)
		c.log.Debug("lease released", "shard", o.shard)
		return true, nil
	}
	if errors.Is(err, errGone) {
		return false, nil
	}
	return false, err
}

// startHandoff answers another owner's request for o: stop fetching, let the
// delivered records settle for up to half the handoff time, checkpoint and
// release, so the asker resumes exactly where this owner stopped. A
// handoff whose records do not all settle in that time is postponed, never
// cut short (postpone): releasing then would let the asker handle those
// records again while this owner's handlers still run them, and a key's
// later records before them. While the record that stopped the last
// handoff is still unsettled, a new request is postponed at once.
func (c *Coordinator) startHandoff(o *owned, to string) {
	o.mu.Lock()
	s := o.sess
	st := o.stateNow()
	step := handoffStep(st.handing(), !st.held(), func() bool {
		if s == nil || o.stuck == nil || o.stuckIn != s.wm {
			return false
		}
		first, out := s.wm.firstPending()
		return out && first == *o.stuck
	})
	switch step {
	case handoffIgnore:
		o.mu.Unlock()
		return
	case handoffPostpone:
		o.mu.Unlock()
		c.postpone(o, nil, to, s.wm.pending())
		return
	}
	if !o.hand() {
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	c.log.Info("handing lease over", "shard", o.shard, "to", to)
	began := time.Now()
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		if s != nil {
			s.cancel()
			<-s.done
			wctx, cancel := context.WithTimeout(c.ctx, c.cfg.Handoff/2)
			err := s.wm.wait(wctx)
			cancel()
			switch drainedStep(err == nil, c.ctx.Err() != nil) {
			case drainedPostpone:
				c.postpone(o, s, to, s.wm.pending())
				return
			case drainedStop:
				o.mu.Lock()
				o.handBack("handoff left to Stop")
				o.mu.Unlock()
				return
			}
		}
		if !c.handStep(o, stCheckpointing) {
			return // fenced or lost meanwhile: nothing more to write
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), finalWrites)
		defer cancel()
		if err := c.persistFinal(ctx, o); err != nil {
			c.log.Warn("handoff: checkpoint failed; the next owner reads again from the last one", "shard", o.shard, "err", err)
		}
		if !c.handStep(o, stReleasing) {
			return
		}
		c.finishHandoff(o, began)
	}()
}

// handStep moves o's handoff on to step, under o.mu; false when the lease
// is no longer held here (fenced, lost, or released by Stop meanwhile).
func (c *Coordinator) handStep(o *owned, step leaseState) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.stateNow().handing() {
		return false
	}
	return o.handStep(step)
}

// handoffAction is how a held lease answers a request for it.
type handoffAction int

const (
	handoffIgnore   handoffAction = iota // a handoff is under way, or the lease is gone
	handoffPostpone                      // the record that stopped the last handoff is still the first unsettled: postpone at once
	handoffDrain                         // stop the reader, let its records settle for up to Handoff/2
)

// handoffStep decides how a lease (handing: a handoff is under way; gone)
// answers a request; stuck (asked only when it matters) reports whether
// the record that stopped the last handoff is still the first unsettled
// one of the lease's reader generation.
func handoffStep(handing, gone bool, stuck func() bool) handoffAction {
	switch {
	case handing || gone:
		return handoffIgnore
	case stuck():
		return handoffPostpone
	}
	return handoffDrain
}

// drainedAction is what a handoff does once its drain ended.
type drainedAction int

const (
	drainedRelease  drainedAction = iota // checkpoint the settled prefix and release
	drainedPostpone                      // keep the lease and read on (postpone)
	drainedStop                          // leave the lease to Stop's final writes
)

// drainedStep decides what a handoff does after its drain: settled, every
// record it delivered settled; ending, the coordinator's context ended
// (Stop, past its time for the records: its final writes release the
// lease, or leave it to expire while a handler still runs a record).
// Records still being handled never go to the asker: the handoff is
// postponed, never cut short.
func drainedStep(settled, ending bool) drainedAction {
	switch {
	case settled:
		return drainedRelease
	case ending:
		return drainedStop
	}
	return drainedPostpone
}

// postpone ends a handoff whose delivered records did not settle in time:
// this owner keeps the lease and, when s (the session the handoff stopped)
// is given, reads on after the last record it handed out, in the same
// generation, so the records still in flight settle into its checkpoints.
// Taking the lease again clears the request; the asker asks again on a
// later pass. Should that write fail, the request stays and the next look
// at it (a checkpoint tick) postpones again. A handler that never returns
// so holds its own shard; Status counts each postponement.
func (c *Coordinator) postpone(o *owned, s *session, to string, pending uint64) {
	o.mu.Lock()
	if s != nil {
		if first, out := s.wm.firstPending(); out {
			o.stuck, o.stuckIn = &first, s.wm
		}
		if o.stateNow().handing() {
			o.handBack("handoff postponed")
			c.resumeLocked(o, s)
		}
	}
	o.mu.Unlock()
	o.st.postponed.Add(1)
	c.cfg.Counters.Postponed.Add(1)
	c.log.Warn("handoff postponed: records still being handled; lease kept, the asker asks again later",
		"shard", o.shard, "to", to, "pending", pending)
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.leaseCallTimeout())
	defer cancel()
	_, err := c.mutate(ctx, o, "lease keep", func(l lease.Lease) (lease.Lease, error) {
		if l.PendingOwner == "" {
			return l, errNothing
		}
		return c.cfg.Leases.Take(ctx, l, c.cfg.Owner)
	})
	if err != nil && !errors.Is(err, errNothing) && !errors.Is(err, errGone) && c.ctx.Err() == nil {
		c.log.Warn("handoff postponed; clearing the request failed, retried at the next look", "shard", o.shard, "err", err)
	}
}

// resumeLocked starts a reader that goes on after the last record session
// s (stopped) handed out, in s's generation; o.mu is held. Nothing is read
// twice and the records of s still in flight move the checkpoint. Once
// Stop has begun it starts none: a handoff postponed during a stop (the
// keeper's writes go on) would otherwise read on, and hand out records
// that Stop neither waits for nor stops until it releases the lease.
func (c *Coordinator) resumeLocked(o *owned, s *session) {
	if !o.stateNow().held() || o.ended() || o.fctx.Err() != nil || c.ctx.Err() != nil || o.sess != s || s.wm.discard.Load() || !c.running() {
		return
	}
	from := s.from
	if m, ok := s.wm.lastOut(); ok {
		from = startAt{typ: types.ShardIteratorTypeAtSequenceNumber, seq: m.seq, skip: true, sub: m.sub, lazy: true}
	}
	sctx, cancel := context.WithCancel(c.ctx)
	ns := &session{wm: s.wm, from: from, pin: s.pin, cancel: cancel, done: make(chan struct{})}
	context.AfterFunc(o.fctx, func() {
		ns.wm.abandon()
		cancel()
	})
	if !o.read(ns) {
		cancel()
		return
	}
	c.log.Debug("reader resumed after a postponed handoff", "shard", o.shard, "sequence", from.seq)
	c.workers.Add(1) // the handoff's goroutine holds one: Stop is not waiting on zero
	if c.fanOut != nil {
		go c.readFanOut(sctx, o, ns)
		return
	}
	go c.read(sctx, o, ns, "")
}

// finishHandoff releases a lease being handed over. A failed release is
// retried: the lease is marked as being handed over and renewed meanwhile,
// so nobody else takes it, and its reader is stopped. When the release
// still fails after the handoff time, the owner keeps the lease: it
// clears the request and reads the shard again from its checkpoint. So a
// handoff ends with the lease released, lost or kept, never stranded.
// (Stop releases what a handoff left.)
func (c *Coordinator) finishHandoff(o *owned, began time.Time) {
	bo := backoff{base: 50 * time.Millisecond, max: time.Second, site: "handoff release", shard: o.shard}
	for {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.leaseCallTimeout())
		released, err := c.releaseLease(ctx, o)
		cancel()
		if released {
			c.cfg.Counters.HandedOver.Add(1)
		}
		if err == nil || c.ctx.Err() != nil {
			return
		}
		if time.Since(began) < c.cfg.Handoff {
			c.log.Warn("handoff: release failed; retrying", "shard", o.shard, "err", err)
		} else {
			kctx, cancel := context.WithTimeout(c.ctx, c.cfg.leaseCallTimeout())
			kerr := c.keep(kctx, o)
			cancel()
			if kerr == nil {
				c.log.Warn("handoff: release kept failing; lease kept and read on", "shard", o.shard, "err", err)
				return
			}
			c.log.Warn("handoff: release and keeping the lease failed; retrying", "shard", o.shard, "err", err, "keep_err", kerr)
		}
		if !sleep(c.ctx, bo.next()) {
			return
		}
	}
}

// keep ends a handoff that could not release o: it takes the lease again
// for this owner (which clears the request) and lets the next pass reopen
// the shard from its checkpoint. Records still unsettled from before the
// handoff are abandoned: they are read again.
func (c *Coordinator) keep(ctx context.Context, o *owned) error {
	_, err := c.mutate(ctx, o, "lease keep", func(l lease.Lease) (lease.Lease, error) {
		nl, err := c.cfg.Leases.Take(ctx, l, c.cfg.Owner)
		if err == nil {
			o.releaseSent = false // kept: this owner's again
			if o.sess != nil {
				o.sess.wm.abandon()
				o.unread()
			}
			o.handBack("handoff kept")
		}
		return nl, err
	})
	if errors.Is(err, errGone) {
		return nil
	}
	if err == nil {
		c.wake(false)
	}
	return err
}

// beforeHold, when set (tests only, export_test.go), runs in takeLease
// after the take's answer, before the lease is held.
var beforeHold atomic.Pointer[func()]

// takeLease takes l for this owner and holds it.
func (c *Coordinator) takeLease(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	sent := time.Now()
	nl, err := c.cfg.Leases.Take(ctx, l, c.cfg.Owner)
	if err != nil {
		return lease.Lease{}, err
	}
	o := &owned{shard: nl.ShardID, key: nl.Key, log: c.log, l: nl}
	o.taken() // before its fence's timer exists
	o.fctx, o.fencer = context.WithCancel(context.Background())
	o.lctx = newLeaseCtx(o.fctx, &o.until, c.epoch)
	o.timer = time.AfterFunc(time.Hour, func() { c.fenceIfExpired(o) })
	if h := beforeHold.Load(); h != nil {
		(*h)()
	}
	c.mu.Lock()
	o.st = c.statsLocked(nl.ShardID)
	o.st.forgetReads()
	o.setLease(nl, time.Time{})
	c.owned[nl.ShardID] = o
	delete(c.pending, nl.Key)
	delete(c.letGo, nl.ShardID)
	delete(c.fenced, nl.ShardID)
	c.mu.Unlock()
	// Its fence once it is held: a heartbeat confirmed before then
	// renewed only the leases held, and with liveness per instance the
	// fence is no later than the last confirmed beat's, so one counted
	// before it was held stayed on the beat before (fleettest/dst mix
	// all, seed 353: under a store answering 0.85 s late, that lease
	// alone fenced before the next beat's answer).
	c.renewed(o, sent)
	c.cfg.Counters.Taken.Add(1)
	c.log.Info("lease taken", "shard", nl.ShardID, "previous_owner", l.Owner, "checkpoint", nl.Checkpoint)
	return nl, nil
}

// followHandoffs takes the leases this owner asked for once their owner has
// released them, or by force after the handoff time. The renewal loop and
// a lease pass both call it, one at a time (followMu): one of them that
// read a lease under this owner's name while the other's take of it had
// not returned would drop the request, and the pass's listing would then
// show the lease neither held nor asked for, which takeBack takes a
// second time (two readers of one shard).
func (c *Coordinator) followHandoffs(ctx context.Context, inPass bool) {
	c.followMu.Lock()
	defer c.followMu.Unlock()
	if c.beatStale() {
		return
	}
	c.mu.Lock()
	asked := slices.Sorted(maps.Keys(c.pending)) // the order of the reads and takes
	c.mu.Unlock()
	took := false
	for _, key := range asked {
		sent := time.Now() // the read's age is judged at its send (askedOwnerDead)
		l, err := c.cfg.Leases.Get(ctx, key)
		drop := false
		switch {
		case errors.Is(err, lease.ErrNotFound):
			drop = true
		case err != nil:
			c.log.Warn("handoff: lease read failed", "key", key, "err", err)
		default:
			switch followStep(c.cfg.Owner, l, func() bool { return c.askedOwnerDead(l, sent) }) {
			case followDrop:
				drop = true
			case followTakeDead:
				c.log.Warn("owner asked for the lease is dead; taking it", "shard", l.ShardID, "from", l.Owner)
				took = c.takeAsked(ctx, l) || took
			case followTake:
				took = c.takeAsked(ctx, l) || took
			}
		}
		if drop {
			c.mu.Lock()
			delete(c.pending, key)
			c.mu.Unlock()
		}
	}
	if took && !inPass {
		// (In a pass, that pass opens what was taken.)
		c.wake(false)
	}
}

// followAction is what followHandoffs does with a lease this owner (me)
// asked for.
type followAction int

const (
	followWait     followAction = iota // its live owner hands it over, or postpones and clears the request
	followDrop                         // forget the request: taken, ended, gone, or asked for by someone else since
	followTake                         // released: take it
	followTakeDead                     // its owner died mid-handoff: take it now, whatever Handoff
)

// followStep decides what to do with l, as read, a lease me asked for;
// dead (called only when it matters) reports whether its owner is dead
// as a crash failover judges it (askedOwnerDead).
func followStep(me string, l lease.Lease, dead func() bool) followAction {
	switch {
	case l.Owner == me || l.Checkpoint == lease.CheckpointShardEnd:
		return followDrop
	case l.ForeignOwner:
		// A KCL worker took it since: it is taken only once it expires.
		return followDrop
	case l.PendingOwner == me && l.Owner != "" && dead():
		// Dead mid-handoff: it will neither release the lease nor read
		// on, so the handoff time is no reason to wait.
		return followTakeDead
	case l.Owner == "":
		return followTake
	case l.PendingOwner == me:
		// A live owner is never forced: it releases the lease once its
		// records settled, or postpones and clears the request.
		return followWait
	}
	return followDrop // someone else asked since, or the owner kept it
}

// takeAsked takes l, a lease this owner asked for, and reports whether it
// did; one another owner wrote since is left to the next look.
func (c *Coordinator) takeAsked(ctx context.Context, l lease.Lease) bool {
	_, err := c.takeLease(ctx, l)
	if err != nil && !errors.Is(err, lease.ErrLeaseLost) {
		c.log.Warn("handoff: take failed", "shard", l.ShardID, "err", err)
	}
	return err == nil
}

// askedOwnerDead reports whether the owner of l, a lease this owner asked
// for, has stopped as a crash failover judges it (expired: a member by its
// entry's beat, any other owner by the lease's counter, each standing
// still for the failover time on this host's clock). Its lease is then
// taken at once, as the survivors of a crash take a dead owner's leases,
// instead of after the handoff time, which may be far longer (time for
// slow handlers to settle). That is as safe as any crash failover: an
// owner fences itself (stops reading, writes nothing) before it can look
// dead (fenceAfter), and the take is conditional on the counter read. A
// live owner never looks dead, however slow its handoff, and is never
// forced: it releases the lease or postpones the handoff (startHandoff).
//
// sent is when l was read: its age is judged then, not when its answer
// was processed (see readMembers).
func (c *Coordinator) askedOwnerDead(l lease.Lease, sent time.Time) bool {
	c.mu.Lock()
	view := c.view // readMembers replaces the maps, never writes them
	c.mu.Unlock()
	return c.expired(l, view, sent)
}
