package shard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// pass is one round of shard sync: (re-)list the shards and create their
// leases, take leases per balancing, and start a reader for every held shard
// whose parents are finished. The first pass (from Start) returns every
// error; later passes are retried by the sync loop. Each step reads what
// it needs into p and acts on it; the decisions that need no I/O are pure
// functions of what was read (heldStep, deletable, belowShare, leftover,
// followStep, planBalanceEffects).
func (c *Coordinator) pass(ctx context.Context, relist bool) error {
	ctx, cancel := c.passScope(ctx)
	defer cancel()
	c.passMu.Lock()
	defer c.passMu.Unlock()
	if !c.running() || c.Err() != nil {
		return nil
	}
	p := &passView{relist: relist, pinnedHere: map[string]bool{}}
	c.mu.Lock()
	p.lin = c.lineage
	c.mu.Unlock()
	if over, err := c.passShards(ctx, p); over || err != nil {
		return err
	}
	for _, step := range []func(context.Context, *passView) error{c.passMembers, c.passLeases, c.passCreate, c.passFleetStart} {
		if err := step(ctx, p); err != nil {
			return err
		}
	}
	c.passDrop(ctx, p)
	if p.listed {
		// The observer's clock for a counter starts after the listing
		// that shows it, never before the write.
		p.errs = append(p.errs, c.balance(ctx, p.leases, p.byShard, p.view, time.Now(), p.listSent, p.reserve)...)
	} else if c.members != nil {
		c.refreshParents(ctx, p.byShard)
	}
	c.passReaders(ctx, p)
	return errors.Join(p.errs...)
}

// passView is what one pass has read so far, and the errors it goes on
// after.
type passView struct {
	relist     bool
	lin        *Lineage
	listedAt   time.Time  // when the shards were listed (relist)
	view       memberView // the members, with liveness per instance
	firstBeat  time.Time  // the first pass's heartbeat; zero on later passes
	leases     []lease.Lease
	listed     bool      // leases is a listing of this pass
	listSent   time.Time // when the last listing was sent (balance)
	byShard    map[string]lease.Lease
	pinnedHere map[string]bool // leases this pass created pinned at Latest
	atStart    []lease.Lease   // a fleet's start: the missing leases, created after the settle
	reserve    map[string]string
	errs       []error
}

// passShards lists the shards when the pass relists (or has never
// listed). over is set when the pass has nothing more to do.
func (c *Coordinator) passShards(ctx context.Context, p *passView) (over bool, err error) {
	if !p.relist && p.lin != nil {
		return false, nil
	}
	shards, at, err := listShardsAt(ctx, c.cfg.Client, c.cfg.Stream)
	p.listedAt = at
	var fresh *Lineage
	if err == nil {
		fresh, err = NewLineage(shards)
	}
	switch {
	case err != nil && p.lin != nil && c.streamDeleted(ctx, "ListShards", err):
		return true, nil // reported through Err and OnFail
	case err != nil && p.lin == nil:
		return true, &Error{Op: "ListShards", Stream: c.cfg.Stream, Err: err}
	case err != nil:
		// Leases are taken and held with the last listing: a Kinesis
		// outage must not keep a dead owner's shards from being taken.
		p.errs = append(p.errs, &Error{Op: "ListShards", Stream: c.cfg.Stream, Err: err})
		p.relist = false
	default:
		p.lin = fresh
		c.mu.Lock()
		c.lineage = fresh
		c.mu.Unlock()
		c.describeDistribution(ctx)
	}
	return false, nil
}

// passMembers, with liveness per instance, heartbeats first on a first
// pass, reads the members, answers their asks and follows this owner's.
func (c *Coordinator) passMembers(ctx context.Context, p *passView) error {
	if c.members == nil {
		return nil
	}
	if c.known == nil {
		// Seen alive before holding anything: others count this owner
		// in their shares from their next pass.
		p.firstBeat = time.Now()
		if err := c.heartbeat(ctx); err != nil {
			return err
		}
	}
	if c.roster != nil && c.rs.passBump.Swap(false) {
		// This owner's entry changed (members.go: the heartbeat).
		if _, err := c.roster.BumpRoster(ctx, c.cfg.Namespace); err != nil {
			c.rs.passBump.Store(true)
			return &Error{Op: "lease roster bump", Stream: c.cfg.Stream, Err: err}
		}
	}
	v, err := c.readMembers(ctx)
	if err != nil {
		return err
	}
	p.view = v
	c.declareDead(ctx, v)
	c.tendNotices(ctx, v)
	c.answerAsks(ctx, p.view)
	c.mu.Lock()
	asked := len(c.pending)
	c.mu.Unlock()
	if asked > 0 {
		c.followHandoffs(ctx, true)
	}
	return nil
}

// passLeases lists the leases when the pass must (see mustList); byShard
// is the leases known, listed now or before.
func (c *Coordinator) passLeases(ctx context.Context, p *passView) error {
	if c.members == nil || c.known == nil || c.mustList(p.view) {
		c.mu.Lock()
		fences := c.fences
		c.mu.Unlock()
		p.listSent = time.Now()
		ls, err := c.listLeases(ctx, p.lin)
		if err != nil {
			return &Error{Op: "lease list", Stream: c.cfg.Stream, Err: err}
		}
		p.leases, p.listed = ls, true
		c.known = make(map[string]lease.Lease, len(ls))
		for _, l := range ls {
			c.known[l.ShardID] = l
		}
		c.mu.Lock()
		c.listedFences = fences
		c.mu.Unlock()
		c.pruneLetGo()
		c.pruneFenced()
	}
	p.byShard = c.known
	return nil
}

// passCreate creates the leases of shards that have none (at a fleet's
// start: leaves them to passFleetStart), and lists the leases again when
// it created any that the pass has not listed.
func (c *Coordinator) passCreate(ctx context.Context, p *passView) error {
	foundNew := false
	if p.relist || len(c.awaiting) > 0 {
		missing := c.missingLeases(p.lin, p.byShard, p.listedAt, p.relist)
		if len(missing) > 0 && p.listed && !p.firstBeat.IsZero() && c.startSettles(p.leases) {
			// Created once the instances starting with this one show, each
			// by the one instance the start gives it to (startCreates).
			p.atStart = missing
		} else {
			for _, nl := range missing {
				l, created, err := c.createLease(ctx, nl)
				if err != nil {
					return err
				}
				if created && nl.Checkpoint == lease.CheckpointAtTimestamp {
					p.pinnedHere[nl.ShardID] = true
				}
				p.byShard[nl.ShardID] = l
				foundNew = true
				if p.listed {
					p.leases = append(p.leases, l)
				}
			}
			c.awaiting = nil
		}
	}
	if foundNew && !p.listed {
		// New leases to share out: list them with the rest.
		p.listSent = time.Now()
		ls, err := c.listLeases(ctx, p.lin)
		if err != nil {
			return &Error{Op: "lease list", Stream: c.cfg.Stream, Err: err}
		}
		p.leases, p.listed = ls, true
		for _, l := range ls {
			p.byShard[l.ShardID] = l
		}
	}
	return nil
}

// passFleetStart, on a first pass, waits for the instances starting with
// this one to show, reads the members and leases again when the pass has
// run that long, and creates the missing leases given to this instance.
func (c *Coordinator) passFleetStart(ctx context.Context, p *passView) error {
	if p.listed && !p.firstBeat.IsZero() && c.startSettles(p.leases) {
		// A fleet starting: let the instances starting with this one show
		// in the members (and their takes in the leases) before the shares
		// are computed, and the missing leases given out to create. The
		// wait counts from the first heartbeat.
		if !sleep(ctx, time.Until(p.firstBeat.Add(c.cfg.startSettle()))) {
			return &Error{Op: "lease list", Stream: c.cfg.Stream, Err: ctx.Err()}
		}
	}
	if p.listed && !p.firstBeat.IsZero() && time.Since(p.firstBeat) >= c.cfg.startSettle() {
		// The members and leases read at the start of a first pass that
		// took this long (the wait above, or thousands of creates on a
		// busy table) are stale: the instances starting beside this one
		// have written their first heartbeats and taken leases meanwhile,
		// and shares computed without them would take too many.
		v, err := c.readMembers(ctx)
		if err != nil {
			return err
		}
		// A Scan of the namespace, as the first listing: cheaper than
		// reading every lease by key.
		p.listSent = time.Now()
		ls, err := c.cfg.Leases.List(ctx, c.cfg.Namespace)
		if err != nil {
			return &Error{Op: "lease list", Stream: c.cfg.Stream, Err: err}
		}
		p.view, p.leases = v, ls
		for _, l := range ls {
			p.byShard[l.ShardID] = l
		}
	}
	if p.atStart != nil {
		// Each missing lease created by the one instance the start gives
		// it to, which takes it below.
		r, err := c.startCreates(ctx, p.lin, p.atStart, &p.view, &p.leases, p.byShard, p.pinnedHere)
		if err != nil {
			return err
		}
		p.reserve = r
	}
	return nil
}

// passDrop, on a pass that relisted the shards, deletes the leases of
// finished shards the stream no longer lists.
func (c *Coordinator) passDrop(ctx context.Context, p *passView) {
	switch {
	case p.relist && p.listed:
		p.leases = c.dropExpiredLeases(ctx, p.lin, p.leases, p.byShard)
	case p.relist:
		// Without a listing, the finished leases known (a listing shows
		// each once it is released) that the stream no longer lists.
		var gone []lease.Lease
		for _, l := range p.byShard {
			if deletable(l, p.lin) {
				gone = append(gone, l)
			}
		}
		slices.SortFunc(gone, func(a, b lease.Lease) int { return strings.Compare(a.ShardID, b.ShardID) })
		c.dropExpiredLeases(ctx, p.lin, gone, p.byShard)
	}
}

// maxParallelOpens bounds the readers a pass opens at once.
const maxParallelOpens = 16

// passReaders releases the held leases read to their end and opens a
// reader for each held lease whose parents are finished. The opens run
// side by side: each waits on a GetShardIterator, and one after another a
// pass that took a dead owner's leases started its last reader only after
// every other's call (fleettest/dst mix kinslow, seed 6: three takes at
// 1.3 s a call left the last shard unread 3.9 s after its take).
func (c *Coordinator) passReaders(ctx context.Context, p *passView) {
	var (
		opens sync.WaitGroup
		errMu sync.Mutex
		slots = make(chan struct{}, maxParallelOpens)
	)
	defer opens.Wait()
	held := c.snapshot()
	for _, o := range held {
		o.mu.Lock()
		st := o.stateNow()
		// (Not while its reader is still recording the children.)
		readerDone := o.sess == nil || closed(o.sess.done)
		l := o.l
		o.mu.Unlock()
		switch heldStep(st, readerDone) {
		case heldRelease:
			// Read to its end (its release failed, or an earlier run left it
			// held): nothing to read, let it go.
			if err := c.release(ctx, o); err != nil {
				errMu.Lock()
				p.errs = append(p.errs, err)
				errMu.Unlock()
			}
		case heldOpen:
			from, ready := c.startable(l, p.lin, p.byShard)
			if !ready {
				continue
			}
			if p.pinnedHere[l.ShardID] && from.lazy {
				from = startAt{typ: types.ShardIteratorTypeLatest}
			}
			slots <- struct{}{}
			opens.Go(func() {
				defer func() { <-slots }()
				if err := c.open(ctx, o, from); err != nil {
					errMu.Lock()
					p.errs = append(p.errs, err)
					errMu.Unlock()
				}
			})
		}
	}
}

// heldAction is what a pass does with a lease held here.
type heldAction int

const (
	heldNothing heldAction = iota // reading, handing over, fenced, gone, or its reader still ending it
	heldRelease                   // read to its end, its reader done: release it
	heldOpen                      // no reader: open one if its parents are finished (startable)
)

// heldStep decides what a pass does with a held lease in state st whose
// reader (if any) has returned when readerDone.
func heldStep(st leaseState, readerDone bool) heldAction {
	switch {
	case st == stEnded && readerDone:
		return heldRelease
	case st == stWaiting:
		return heldOpen
	}
	return heldNothing
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// missingLeases returns the leases to create for the shards of lin that
// have none in byShard: with all (a pass that listed the shards) every
// such shard's, else only those a fleet's start left to another instance
// (awaiting) that are still missing, as the start meant to create them.
//
// A subscription new to the stream that starts at Latest begins at
// today's tip, as the KCL does: closed shards count as read and open
// children start at their tip instead of their horizon.
//
// A lease that would open at Latest is created pinned at the time of the
// shard listing (pinLatest) rather than with the KCL's LATEST, so that
// whoever opens it, whenever, reads every record written since: an owner
// whose first opening fails (or that is fenced first) leaves no gap. The
// opener of a lease its own pass created opens at Latest all the same,
// and pins that.
func (c *Coordinator) missingLeases(lin *Lineage, byShard map[string]lease.Lease, listedAt time.Time, all bool) []lease.Lease {
	c.mu.Lock()
	start := c.start
	c.mu.Unlock()
	fresh := len(byShard) == 0 && start.Kind == Latest
	var out []lease.Lease
	for _, id := range lin.IDs() {
		if _, ok := byShard[id]; ok {
			continue
		}
		if l, ok := c.awaiting[id]; ok {
			out = append(out, l)
			continue
		}
		if !all {
			continue
		}
		if leasedDescendant(id, lin, byShard) {
			// Its lease was deleted after its children started (the
			// KCL's lease cleanup does this): it was read to its end.
			continue
		}
		info, _ := lin.Shard(id)
		checkpoint, sub := "", int64(0)
		switch {
		case fresh && info.Closed:
			checkpoint = lease.CheckpointShardEnd
		case fresh || (!c.hasParent(info, lin, byShard) && positionFor(start, id).typ == types.ShardIteratorTypeLatest):
			checkpoint, sub = lease.CheckpointAtTimestamp, pinMillis(listedAt)
		}
		out = append(out, c.newLease(info, checkpoint, sub))
	}
	return out
}

// createLease stores nl, the lease of a newly found shard (or reads the
// one another instance created first: created is false then). A store
// that returns the lease with its refusal (lease.CreateOrGetter: on
// DynamoDB the refused write carries the item) costs no read for it.
func (c *Coordinator) createLease(ctx context.Context, nl lease.Lease) (lease.Lease, bool, error) {
	if c.creator != nil {
		l, created, err := c.creator.CreateOrGet(ctx, nl)
		if err != nil {
			return lease.Lease{}, false, &Error{Op: "lease create", Stream: c.cfg.Stream, Shard: nl.ShardID, Err: err}
		}
		if created {
			c.log.Debug("lease created", "shard", nl.ShardID, "parents", nl.ParentShardIDs)
		}
		return l, created, nil
	}
	created, err := c.cfg.Leases.Create(ctx, nl)
	if err != nil {
		return lease.Lease{}, false, &Error{Op: "lease create", Stream: c.cfg.Stream, Shard: nl.ShardID, Err: err}
	}
	if created {
		c.log.Debug("lease created", "shard", nl.ShardID, "parents", nl.ParentShardIDs)
		return nl, true, nil
	}
	got, err := c.cfg.Leases.Get(ctx, nl.Key)
	if err != nil {
		return lease.Lease{}, false, &Error{Op: "lease get", Stream: c.cfg.Stream, Shard: nl.ShardID, Err: err}
	}
	return got, false, nil
}

// hasParent reports whether a parent of the shard is listed or has a lease:
// then it is a child, read from its horizon once they are finished.
func (c *Coordinator) hasParent(info Info, lin *Lineage, byShard map[string]lease.Lease) bool {
	for _, p := range info.Parents {
		if _, ok := byShard[p]; ok {
			return true
		}
		if _, ok := lin.Shard(p); ok {
			return true
		}
	}
	return false
}

// leasedDescendant reports whether a child of shard id, or a child of
// one, has a lease.
func leasedDescendant(id string, lin *Lineage, byShard map[string]lease.Lease) bool {
	for _, c := range lin.Children(id) {
		if _, ok := byShard[c]; ok || leasedDescendant(c, lin, byShard) {
			return true
		}
	}
	return false
}

// putLease stores the lease of a newly found shard unless one exists
// (created is false then, and l is the lease it would have stored).
func (c *Coordinator) putLease(ctx context.Context, info Info, checkpoint string, sub int64) (l lease.Lease, created bool, err error) {
	l = c.newLease(info, checkpoint, sub)
	created, err = c.cfg.Leases.Create(ctx, l)
	if err != nil {
		return lease.Lease{}, false, &Error{Op: "lease create", Stream: c.cfg.Stream, Shard: info.ID, Err: err}
	}
	if created {
		c.log.Debug("lease created", "shard", info.ID, "parents", info.Parents)
	}
	return l, created, nil
}

// newLease is the lease of a newly found shard, as createLease stores it.
func (c *Coordinator) newLease(info Info, checkpoint string, sub int64) lease.Lease {
	return lease.Lease{
		Key:             lease.KeyFor(c.cfg.Namespace, info.ID),
		ShardID:         info.ID,
		Checkpoint:      checkpoint,
		SubSequence:     sub,
		ParentShardIDs:  slices.Clone(info.Parents),
		StartingHashKey: info.StartingHashKey,
		EndingHashKey:   info.EndingHashKey,
	}
}

// startable decides whether the shard of l can be read now (every parent
// checkpointed SHARD_END, or gone from the stream) and where.
func (c *Coordinator) startable(l lease.Lease, lin *Lineage, byShard map[string]lease.Lease) (startAt, bool) {
	parents := l.ParentShardIDs
	if info, ok := lin.Shard(l.ShardID); ok && len(parents) == 0 {
		parents = info.Parents
	}
	_, selfListed := lin.Shard(l.ShardID)
	child := false
	for _, p := range parents {
		pl, hasLease := byShard[p]
		_, listed := lin.Shard(p)
		if hasLease || listed {
			child = true
		}
		switch {
		case hasLease && pl.Checkpoint != lease.CheckpointShardEnd && !listed && selfListed:
			// A listing that has the child but not the parent comes after
			// the parent's records passed retention: nothing is left to
			// read before the child's (the KCL counts it as finished too).
			// Its own lease is finished by whoever holds it.
			c.log.Warn("parent shard no longer exists (past the stream's retention) and was not read to its end; its child starts", "shard", l.ShardID, "parent", p)
		case hasLease && pl.Checkpoint != lease.CheckpointShardEnd:
			return startAt{}, false
		case !hasLease && listed:
			// Leases are created parents first, so a listed parent without
			// one while its child has one was read to its end and its
			// lease deleted (the KCL's lease cleanup does this): finished.
		}
	}
	c.mu.Lock()
	p := c.start
	c.mu.Unlock()
	switch l.Checkpoint {
	case "":
		if child && p.Kind != AtTimestamp {
			// Whatever was written to a child before its reader started
			// comes after its parents' records: read all of it. (At a
			// timestamp, the child's records from then on are the same.)
			return startAt{typ: types.ShardIteratorTypeTrimHorizon}, true
		}
		return positionFor(p, l.ShardID), true
	case lease.CheckpointTrimHorizon:
		return startAt{typ: types.ShardIteratorTypeTrimHorizon}, true
	case lease.CheckpointLatest:
		return startAt{typ: types.ShardIteratorTypeLatest}, true
	case lease.CheckpointAtTimestamp:
		if l.SubSequence > 0 {
			// A pin of an opening at Latest (pinLatest): the time is ours and
			// in the past, so the reader may fetch the iterator itself.
			return startAt{typ: types.ShardIteratorTypeAtTimestamp, ts: time.UnixMilli(l.SubSequence), lazy: true}, true
		}
		if p.Kind == AtTimestamp {
			return positionFor(p, l.ShardID), true
		}
		return startAt{typ: types.ShardIteratorTypeTrimHorizon}, true
	}
	// A sequence number: reopen at it and skip what was settled, so the rest
	// of a KPL aggregate is not lost (AFTER_SEQUENCE_NUMBER would skip it).
	return startAt{typ: types.ShardIteratorTypeAtSequenceNumber, seq: l.Checkpoint, skip: true, sub: l.SubSequence}, true
}

// startAt is where a reader opens a shard.
type startAt struct {
	typ types.ShardIteratorType
	seq string    // AT_SEQUENCE_NUMBER
	ts  time.Time // AT_TIMESTAMP
	// skip drops the records of seq whose SubSequence <= sub: they were
	// delivered and settled before.
	skip bool
	sub  int64
	// since, with TRIM_HORIZON, skips the records that arrived before it,
	// up to the first that did not: AT_TIMESTAMP read by the client.
	since time.Time
	// lazy: the position does not depend on when its iterator is fetched
	// and cannot be refused (a time pin of ours), so the reader fetches it,
	// retrying, instead of the pass: kinesalite never answers an
	// AT_TIMESTAMP past a shard's last record, and an idle shard handed
	// over before its first record would hold the pass until one came.
	lazy bool
}

func positionFor(p Position, shardID string) startAt {
	switch p.Kind {
	case Horizon:
		return startAt{typ: types.ShardIteratorTypeTrimHorizon}
	case AtTimestamp:
		return startAt{typ: types.ShardIteratorTypeAtTimestamp, ts: p.Time}
	case AtSequence:
		if p.ShardID == shardID {
			return startAt{typ: types.ShardIteratorTypeAtSequenceNumber, seq: p.Sequence}
		}
	}
	return startAt{typ: types.ShardIteratorTypeLatest}
}

const (
	// timestampCallTimeout bounds one GetShardIterator AT_TIMESTAMP call,
	// which kinesalite never answers while the shard has no record at or
	// after the time; the service answers in milliseconds.
	timestampCallTimeout = 2 * time.Second
	// serverPinMargin and localPinMargin are taken off the time a Latest
	// iterator was made at when it is pinned (pinLatest): records are
	// stamped by the service's clock, and its Date header (whole seconds,
	// rounded down) may come from another of its hosts; without a Date
	// header (the in-process Kinesis shares this process's clock) the
	// local clock stands in.
	serverPinMargin = time.Second
	localPinMargin  = time.Second
)

// iterator gets a shard iterator, retrying throttling and transient errors a
// few times. An empty iterator means the shard has nothing left from there.
// since is a time, by the service's clock where its answer says it, at or
// before the moment the iterator's position was fixed: for a Latest
// iterator every later record arrives at or after it.
func (c *Coordinator) iterator(ctx context.Context, shardID string, at startAt) (it string, since time.Time, err error) {
	in := &kinesis.GetShardIteratorInput{
		ShardId:           aws.String(shardID),
		ShardIteratorType: at.typ,
	}
	in.StreamName, in.StreamARN = streamRef(c.cfg.Stream)
	timeout := callTimeout
	switch at.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		in.StartingSequenceNumber = aws.String(at.seq)
	case types.ShardIteratorTypeAtTimestamp:
		in.Timestamp = aws.Time(at.ts)
		timeout = timestampCallTimeout
	}
	bo := backoff{base: 100 * time.Millisecond, max: 2 * time.Second, site: "get iterator", shard: shardID}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		out, err := c.cfg.Client.GetShardIterator(cctx, in)
		cancel()
		if err == nil {
			return aws.ToString(out.ShardIterator), serviceTime(out.ResultMetadata, sent), nil
		}
		if cl := classify(err); (cl == classThrottle || cl == classRetry) && attempt < 5 && ctx.Err() == nil && sleep(ctx, bo.next()) {
			continue
		}
		return "", time.Time{}, &Error{Op: "GetShardIterator", Stream: c.cfg.Stream, Shard: shardID, Err: err}
	}
}

// open starts a reader of o at from. The iterator is fetched here (so a
// record written after open returns is read), unless from is lazy. An
// opening at Latest is pinned at once (pinLatest): written to the lease and
// kept as the session's start, so that neither an iterator that expires
// before the first record nor a stop, handoff, lost lease or crash lets
// anyone open at a later Latest and skip what was written in between.
func (c *Coordinator) open(ctx context.Context, o *owned, from startAt) error {
	var it string
	var pin *startAt
	if !from.lazy {
		var since time.Time
		var err error
		it, since, err = c.iterator(ctx, o.shard, from)
		if err != nil {
			if c.gone(ctx, o.shard, err) {
				// Nothing was read: there is nothing to settle.
				c.finishGone(ctx, o, &session{wm: newWatermark()})
				return nil
			}
			if ctx.Err() == nil {
				o.st.readFailed(err) // the shard waits, unread, for the next pass
			}
			return err
		}
		if from.typ == types.ShardIteratorTypeLatest {
			from = pinLatest(since)
			pin = &from
		}
	}
	sctx, cancel := context.WithCancel(c.ctx)
	wm := newWatermark()
	wm.st = o.st
	wm.until, wm.epoch, wm.lost = &o.until, c.epoch, o.fctx
	if o.lctx != nil {
		wm.lost = o.lctx // done by the clock past the fence too
	}
	s := &session{wm: wm, from: from, pin: pin, cancel: cancel, done: make(chan struct{})}
	o.mu.Lock()
	if !o.read(s) { // fenced, gone or being handed over
		o.mu.Unlock()
		cancel()
		return nil
	}
	// A fence stops the reader and abandons its records at once.
	context.AfterFunc(o.fctx, func() {
		s.wm.abandon()
		cancel()
	})
	o.persisted = 0
	o.mu.Unlock()
	if pin != nil {
		// Before the reader starts, so nothing can settle first. A failure
		// leaves the pin to the next checkpoint tick.
		if err := c.persist(ctx, o, false); err != nil {
			c.log.Warn("pinning a shard opened at Latest failed; retrying at the next checkpoint", "shard", o.shard, "err", err)
		}
	}
	c.log.Debug("reader started", "shard", o.shard, "at", string(from.typ), "sequence", from.seq, "time", from.ts)
	c.workers.Add(1)
	if c.fanOut != nil {
		// It subscribes where the session opened; a Latest opening was
		// pinned above at the time its iterator was made.
		go c.readFanOut(sctx, o, s)
		return nil
	}
	go c.read(sctx, o, s, it)
	return nil
}

// pinLatest is the durable form of an iterator opened at Latest: the first
// record at or after since, the time it was made at (less a margin).
// Records written before it and within the margin may be read too, which
// at least once allows; none written after it is skipped.
func pinLatest(since time.Time) startAt {
	return startAt{typ: types.ShardIteratorTypeAtTimestamp, ts: since, lazy: true}
}

// writePin checkpoints a time pin: CheckpointAtTimestamp with the time in
// Unix milliseconds as its sub-sequence number.
func (c *Coordinator) writePin(ctx context.Context, l lease.Lease, at startAt) (lease.Lease, error) {
	return c.cfg.Leases.Checkpoint(ctx, l, lease.CheckpointAtTimestamp, pinMillis(at.ts))
}

// pinMillis is a pin's time in Unix milliseconds, rounded down (at least 1:
// 0 is the KCL's AT_TIMESTAMP sentinel).
func pinMillis(t time.Time) int64 { return max(t.UnixMilli(), 1) }

// serviceTime returns a time, by the service's clock where the answer says
// it, at or before the moment a call sent at sent was served: the answer's
// Date header (whole seconds, rounded down) less the call's duration and
// serverPinMargin, else the local clock less localPinMargin.
func serviceTime(md middleware.Metadata, sent time.Time) time.Time {
	if st, ok := awsmiddleware.GetServerTime(md); ok {
		return st.Add(-time.Since(sent) - serverPinMargin)
	}
	return sent.Add(-localPinMargin)
}

// reposition moves a running reader to p (Seek): the old generation is
// abandoned before its reader stops, so none of its settlements counts.
func (c *Coordinator) reposition(ctx context.Context, o *owned, p Position) error {
	old := o.session()
	if old == nil {
		return nil
	}
	old.wm.abandon()
	old.cancel()
	select {
	case <-old.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	o.mu.Lock()
	if o.sess == old {
		o.unread()
	}
	o.mu.Unlock()
	at := positionFor(p, o.shard)
	if err := c.open(ctx, o, at); err != nil {
		return err
	}
	return c.persistSeek(ctx, o, at)
}

// persistSeek writes where a seek moved the shard, so that a restart before
// any record after the seek has settled resumes there rather than at the
// checkpoint from before it. The horizon and a sequence number are written
// as they are (a sequence number with sub-sequence -1: at it, not after
// it); a timestamp pins the first record at that time if there is one yet
// (until then a restart reads again from the old checkpoint, which
// duplicates records but loses none). Latest was pinned by open.
func (c *Coordinator) persistSeek(ctx context.Context, o *owned, at startAt) error {
	var pin string
	if at.typ == types.ShardIteratorTypeAtTimestamp {
		pin = c.firstAt(ctx, o.shard, at)
	}
	_, err := c.mutate(ctx, o, "lease checkpoint", func(l lease.Lease) (lease.Lease, error) {
		s := o.sess
		if s == nil || o.ended() || s.wm.discard.Load() {
			return l, errNothing
		}
		if _, settled, _ := s.wm.progress(); settled {
			return l, errNothing // the persister writes from here on, past the seek
		}
		switch {
		case at.typ == types.ShardIteratorTypeTrimHorizon:
			return c.cfg.Leases.Checkpoint(ctx, l, lease.CheckpointTrimHorizon, 0)
		case at.typ == types.ShardIteratorTypeAtSequenceNumber:
			return c.cfg.Leases.Checkpoint(ctx, l, at.seq, -1)
		case pin != "":
			return c.cfg.Leases.Checkpoint(ctx, l, pin, -1)
		}
		return l, errNothing
	})
	if errors.Is(err, errNothing) || errors.Is(err, errGone) {
		return nil
	}
	return err
}

// firstAt returns the sequence number of the first record at a position
// that a later iterator reaches again (a timestamp), or "" when there is
// none yet or it cannot be read: pinning is an improvement, not a duty.
func (c *Coordinator) firstAt(ctx context.Context, shardID string, at startAt) string {
	it, _, err := c.iterator(ctx, shardID, at)
	if err != nil || it == "" {
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := c.cfg.Client.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it), Limit: aws.Int32(1)})
	if err != nil {
		c.log.Debug("pinning a seek's position failed", "shard", shardID, "err", err)
		return ""
	}
	if len(out.Records) == 0 {
		return ""
	}
	return aws.ToString(out.Records[0].SequenceNumber)
}

// dropExpiredLeases deletes the leases of finished shards that the stream no
// longer lists (their records are past retention), so the lease table does
// not grow with every reshard. A child whose parent lease is gone counts
// that parent as finished.
func (c *Coordinator) dropExpiredLeases(ctx context.Context, lin *Lineage, leases []lease.Lease, byShard map[string]lease.Lease) []lease.Lease {
	kept := leases[:0:0]
	for _, l := range leases {
		if !deletable(l, lin) {
			kept = append(kept, l)
			continue
		}
		if err := c.cfg.Leases.Delete(ctx, l); err != nil && !errors.Is(err, lease.ErrLeaseLost) && !errors.Is(err, lease.ErrNotFound) {
			c.log.Warn("deleting the lease of an expired shard failed", "shard", l.ShardID, "err", err)
			kept = append(kept, l)
			continue
		}
		delete(byShard, l.ShardID)
		c.log.Debug("lease of an expired shard deleted", "shard", l.ShardID)
	}
	return kept
}

// deletable reports whether l is the released lease of a finished shard
// that lin (the stream's listing) no longer has: past retention.
func deletable(l lease.Lease, lin *Lineage) bool {
	_, listed := lin.Shard(l.ShardID)
	return !listed && l.Checkpoint == lease.CheckpointShardEnd && l.Owner == ""
}

// balance takes and asks for leases per the plan of this pass's listing,
// in three steps: settleView makes sure the members view may judge
// liveness (or takes nothing this pass), planBalanceEffects decides on
// what was read, and applyBalance performs its effects. At a fleet's
// start, reserve gives each active lease to the owner the start gives it
// to (startCreates): the plan is made with them reserved.
//
// A counter that changed is stamped at now, after the listing returned; a
// lease's age is judged at asOf, when the listing was sent: never on when
// an answer read before a pause was processed (see readMembers).
func (c *Coordinator) balance(ctx context.Context, leases []lease.Lease, byShard map[string]lease.Lease, view memberView, now, asOf time.Time, reserve map[string]string) []error {
	c.obs.observe(leases, now)
	view, ok, err := c.settleView(ctx, leases, view)
	if !ok {
		if err != nil {
			return []error{err}
		}
		return nil
	}
	var errs []error
	if c.members != nil {
		errs = append(errs, c.takeBack(ctx, leases, byShard, view)...)
	}
	eff := planBalanceEffects(balanceView{
		me: c.cfg.Owner, namespace: c.cfg.Namespace, mode: c.cfg.Balance, members: c.members != nil, failover: c.cfg.Failover,
		leases: leases, view: view, held: c.heldKeys(), reserve: reserve, declared: c.takeDeclarations(),
		now: now, asOf: asOf, obs: c.obs,
		overdue: c.cfg.overdueAfter(), freeSince: c.freeSince, leaving: c.leaving.Load(),
	})
	c.freeSince = eff.freeSince
	return append(errs, c.applyBalance(ctx, eff, byShard, now)...)
}

// settleView returns the members view a pass's balance may judge
// liveness on, reading the members again when view may be behind; ok
// false: this pass takes nothing (err says why, when a read failed).
func (c *Coordinator) settleView(ctx context.Context, leases []lease.Lease, view memberView) (_ memberView, ok bool, err error) {
	if c.beatStale() {
		c.log.Warn("heartbeat not written within the fence time: taking no lease this pass")
		return view, false, nil
	}
	if c.members != nil && time.Since(view.sent) > c.cfg.leaseCallTimeout() {
		// The view says who was alive when it was read. Older than a lease
		// call's deadline (a pause, GC or slow pass since), it may judge
		// dead a member that has beaten since (issue 29, defect 6: a
		// paused instance took every lease of one that came back while it
		// was frozen): read it again, and take nothing on a second one
		// that is as old.
		v, err := c.readMembers(ctx)
		if err != nil {
			return view, false, err
		}
		if time.Since(v.sent) > c.cfg.leaseCallTimeout() {
			c.log.Warn("members read answered too late to judge liveness: taking no lease this pass", "age", time.Since(v.sent))
			return view, false, nil
		}
		view = v
	}
	if c.members != nil && viewBehind(c.cfg.Owner, leases, view, c.obs) {
		// A member the view judges dead holds a lease written, for all
		// this owner knows, after the view was sent: the member may have
		// come back since (its fence ended, a beat confirmed: it takes
		// its leases back at once) and be reading it. Judge it on a view
		// sent after the listing that shows that write.
		v, err := c.readMembers(ctx)
		if err != nil {
			return view, false, err
		}
		view = v
	}
	return view, true, nil
}

// balanceView is what a pass's balance decides on: read, settled and
// observed before it plans, so planning calls no store and reads no
// clock (obs holds when each listed counter was first seen).
type balanceView struct {
	me, namespace string
	mode          Balance
	members       bool // liveness per instance (a member store)
	failover      time.Duration
	leases        []lease.Lease     // the listing, with what takeBack wrote
	view          memberView        // settled (settleView)
	held          map[string]bool   // the keys held or asked for here (heldKeys)
	reserve       map[string]string // a fleet's start (startCreates)
	declared      map[string]int64  // the members this owner declared dead (roster)
	// now is when the listing returned (obs has observed it then), asOf
	// when it was sent: an owner's age is judged at the earlier.
	now, asOf time.Time
	obs       *observer
	// overdue is how long a free lease planned for another member, or a
	// reservation, may stand untaken (overdueAfter); freeSince when each
	// spare was first planned free (takeOverdue); leaving: this owner is
	// stopping and takes nothing overdue.
	overdue   time.Duration
	freeSince map[string]observation
	leaving   bool
}

// balanceEffects is what a pass's balance does, as data, in the order
// applyBalance does it.
type balanceEffects struct {
	status []listedLease // the listing as Status shows it
	take   []lease.Lease // taken in this order
	spare  []lease.Lease // tried in order for a take another won (nextSpare)
	ask    []lease.Lease // handoffs requested, then published by a heartbeat
	target int           // the fair share the asks aim at (logged)
	adopt  []lease.Lease // requests on held leases to answer (members only)
	compat bool          // renew every lease too (members only; needsCompat)
	// release are the leases left in this owner's name (leftover against
	// held); one is released unless this owner holds it by then (a take
	// of this pass).
	release []lease.Lease
	held    map[string]bool // the keys held when planned
	drop    []lease.Member  // dead members' entries to remove (members only)
	// freeSince replaces balanceView.freeSince for the next pass.
	freeSince map[string]observation
}

// planBalanceEffects is balance's decision on v: what to show, take, ask
// for, answer, release and remove. It calls no store.
func planBalanceEffects(v balanceView) balanceEffects {
	judge := v.now
	if v.asOf.Before(v.now) {
		judge = v.asOf
	}
	expired := func(l lease.Lease) bool {
		return ownerStopped(l, v.members, v.view, func() bool { return v.obs.stale(l, judge, v.failover) })
	}
	e := balanceEffects{status: make([]listedLease, len(v.leases)), held: v.held}
	for i, l := range v.leases {
		e.status[i] = listedLease{l: l, expired: l.Owner != "" && expired(l)}
	}
	held := func(key string) bool { return v.held[key] }
	var plan balance
	planned := plannedLeases(v)
	if v.mode == BalanceOneSteal {
		plan = planBalance(v.me, planned, held, expired)
	} else {
		canTake := func(o string, l lease.Lease) bool { return !v.members || v.view.canJudge(o, l, judge, v.failover) }
		plan = planBulk(v.me, reserved(v.namespace, planned, v.reserve), v.view.planOwners(), held, expired, canTake)
	}
	takeDeclared(&plan, v.declared, v.view, v.leases, len(v.held))
	if !v.leaving {
		e.freeSince = takeOverdue(&plan, v.freeSince, v.now, v.overdue)
	}
	e.take, e.spare, e.target = plan.take, plan.spare, plan.target
	e.ask = plan.steals
	if plan.steal != nil {
		e.ask = append(e.ask, *plan.steal)
	}
	for _, l := range v.leases {
		if leftover(v.me, l, v.held, v.held) {
			e.release = append(e.release, l)
		}
	}
	if !v.members {
		return e
	}
	// Requests on leases this owner holds, seen in the listing (an asker
	// without a member entry publishes none), but not of an asker that
	// is leaving: it would never take it.
	for _, l := range v.leases {
		if askedOfMe(v.me, l) && !v.view.leaving(l.PendingOwner) {
			e.adopt = append(e.adopt, l)
		}
	}
	e.compat = needsCompat(v.me, v.leases, v.view, func(l lease.Lease) bool { return v.obs.stale(l, v.now, v.failover) })
	e.drop = deadMembers(v.view, v.leases)
	return e
}

// plannedLeases is v's listing as the plans see it: each filter of the
// view in turn (withoutLeaving, withoutUntakenReservations).
func plannedLeases(v balanceView) []lease.Lease {
	planned := withoutLeaving(v.leases, v.view)
	if v.members {
		planned = withoutUntakenReservations(v.me, planned, v.view, v.obs, func(l lease.Lease) bool {
			return v.obs.stale(l, v.now, v.overdue)
		})
	}
	return planned
}

// nextSpare returns the take that replaces lost, a take another instance
// won (or whose owner renewed after all): the next spare, now rather than
// a pass later; none for a lease handed to me (asked for: nobody else's
// free lease stands in for it).
func nextSpare(me string, lost lease.Lease, spare []lease.Lease) (next lease.Lease, rest []lease.Lease, ok bool) {
	if len(spare) == 0 || lost.PendingOwner == me {
		return lease.Lease{}, spare, false
	}
	return spare[0], spare[1:], true
}

// applyBalance performs e: it records the listing for Status, takes
// (trying spares for takes lost), asks and publishes the asks, answers
// the requests, sets compat, releases leftovers and removes dead members'
// entries; the next pass lists when it took or asked for anything.
func (c *Coordinator) applyBalance(ctx context.Context, e balanceEffects, byShard map[string]lease.Lease, now time.Time) []error {
	var errs []error
	c.mu.Lock()
	c.listed, c.listedAt = e.status, now
	c.mu.Unlock()
	c.statusRead.Store(false)
	take, spare := e.take, e.spare
	took := 0
	for i := 0; i < len(take); i++ {
		l := take[i]
		nl, err := c.takeLease(ctx, l)
		switch {
		case errors.Is(err, lease.ErrLeaseLost):
			var next lease.Lease
			var ok bool
			if next, spare, ok = nextSpare(c.cfg.Owner, l, spare); ok {
				take = append(take, next)
			}
		case err != nil:
			errs = append(errs, &Error{Op: "lease take", Stream: c.cfg.Stream, Shard: l.ShardID, Err: err})
		default:
			byShard[nl.ShardID] = nl
			took++
		}
	}
	asked := 0
	for _, s := range e.ask {
		nl, err := c.cfg.Leases.RequestHandoff(ctx, s, c.cfg.Owner)
		switch {
		case err == nil:
			c.mu.Lock()
			c.pending[s.Key] = now
			c.mu.Unlock()
			byShard[nl.ShardID] = nl
			asked++
			c.log.Debug("asked for a lease", "shard", s.ShardID, "from", s.Owner)
		case !errors.Is(err, lease.ErrLeaseLost):
			errs = append(errs, &Error{Op: "lease handoff", Stream: c.cfg.Stream, Shard: s.ShardID, Err: err})
		}
	}
	if asked > 0 {
		c.log.Info("asked for leases", "count", asked, "target", e.target)
		if c.members != nil {
			// Publish the requests now rather than at the next renewal.
			if err := c.heartbeat(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.members == nil {
		// With liveness per lease too: the others take a fenced lease
		// left in this owner's name only once it looks expired to them.
		c.releaseLeftovers(ctx, e.release, e.held)
		return errs
	}
	for _, l := range e.adopt {
		c.mu.Lock()
		o := c.owned[l.ShardID]
		c.mu.Unlock()
		if o != nil {
			c.adopt(o, l)
		}
	}
	c.mu.Lock()
	if e.compat != c.compat {
		c.log.Info("owners without a member entry hold leases: renewing every lease too", "compat", e.compat)
	}
	c.compat = e.compat
	c.mu.Unlock()
	c.releaseLeftovers(ctx, e.release, e.held)
	c.dropDeadMembers(ctx, e.drop)
	c.wantMore = took > 0 || asked > 0 || len(take) > took
	return errs
}

// withoutLeaving returns leases as the plans see them while live members
// of view are leaving (lease.Member.Leaving): their leases are neither
// shared out nor asked for (they stay theirs until they are dead by their
// beat: a handler may still run a record), and a request of theirs is
// none (released to them, a lease is free).
func withoutLeaving(leases []lease.Lease, view memberView) []lease.Lease {
	some := false
	for o, m := range view.all {
		some = some || (m.Leaving && view.live[o])
	}
	if !some {
		return leases
	}
	out := make([]lease.Lease, 0, len(leases))
	for _, l := range leases {
		if l.Owner != "" && view.leaving(l.Owner) {
			continue
		}
		if view.leaving(l.PendingOwner) {
			l.PendingOwner = ""
		}
		out = append(out, l)
	}
	return out
}

// withoutUntakenReservations returns leases with the reservation dropped
// from each lease released to an asker that has not taken it (with
// liveness per instance), which the plans then share out as free:
//   - the asker has no member entry: it asked and left before it took what
//     it was given (issue 29, dst mix churn seed 1796552912398768164:
//     counted as the gone asker's until the reservation stood still for a
//     failover time, it was read by nobody for 9 s). A reservation first
//     seen after the members read was sent stays: its asker's entry may
//     have landed after that read;
//   - the reservation stood still for overdueAfter (untaken): the asker
//     beats but does not take, and a failover time more would leave the
//     lease unread that much longer (takeOverdue).
func withoutUntakenReservations(me string, leases []lease.Lease, view memberView, obs *observer, untaken func(lease.Lease) bool) []lease.Lease {
	var out []lease.Lease
	for i, l := range leases {
		if l.Owner != "" || l.PendingOwner == "" || l.PendingOwner == me {
			continue
		}
		_, member := view.all[l.PendingOwner]
		gone := !member && !obs.seenSince(l, view.sent)
		if !gone && !untaken(l) {
			continue
		}
		if out == nil {
			out = slices.Clone(leases)
		}
		out[i].PendingOwner = ""
	}
	if out == nil {
		return leases
	}
	return out
}

// viewBehind reports whether a lease listed under another member that
// view judges dead may have been written after view was sent (seen first
// by obs after it): a member back from its fence takes its leases back,
// and a view sent before its new beat landed would still judge it dead
// (issue 29: two readers of one shard). A lease that was written before
// the view was sent is safe to judge by it: a take of it is conditional on
// that write's counter, and the member's own take back would change it.
func viewBehind(me string, leases []lease.Lease, view memberView, obs *observer) bool {
	for _, l := range leases {
		if l.Owner == "" || l.Owner == me || l.Checkpoint == lease.CheckpointShardEnd {
			continue
		}
		if _, member := view.all[l.Owner]; member && !view.live[l.Owner] && obs.seenSince(l, view.sent) {
			return true
		}
	}
	return false
}

// askedOfMe reports whether l, as listed, is held by me and asked for by
// another owner.
func askedOfMe(me string, l lease.Lease) bool {
	return l.Owner == me && l.PendingOwner != "" && l.PendingOwner != me
}

// needsCompat reports whether, in the leases listed, an owner without a
// member entry holds a lease it still renews (stale: its counter stood
// still for the failover time) or asks for one: then this owner renews
// every lease it holds too, as such owners judge liveness by the lease
// alone (a rolling upgrade, or Java KCL workers).
func needsCompat(me string, leases []lease.Lease, view memberView, stale func(lease.Lease) bool) bool {
	for _, l := range leases {
		_, member := view.all[l.Owner]
		_, askerMember := view.all[l.PendingOwner]
		if (l.Owner != "" && l.Owner != me && !member && !stale(l)) ||
			(l.PendingOwner != "" && l.PendingOwner != me && !askerMember) {
			return true
		}
	}
	return false
}

// releaseLeftovers releases the leases of leases (those planBalanceEffects
// found left over) that name this owner although it does not hold them now
// and the plan did not count as held (planned): with liveness per instance
// what takeBack could not take back; with liveness per lease what a fence
// made it forget or an earlier run under this owner id left. The others judge a live member by its entry
// alone and never force it, so nobody would read such a shard while this
// owner lives: a request for it would go unanswered, and planners whose
// shares differ would each leave it to this owner. Released, it goes to
// whoever the next plans give it to (the owner that asked for it first).
// Its reader was stopped by the fence, and the next owner reads on from
// its checkpoint.
func (c *Coordinator) releaseLeftovers(ctx context.Context, leases []lease.Lease, planned map[string]bool) {
	held := c.heldKeys() // with the leases asked for: a take of one may be landing
	for _, l := range leases {
		if !leftover(c.cfg.Owner, l, held, planned) {
			continue
		}
		nl, err := c.cfg.Leases.Release(ctx, l)
		if err != nil {
			if !errors.Is(err, lease.ErrLeaseLost) && !errors.Is(err, lease.ErrNotFound) {
				// Still listed in this owner's name: the next pass lists
				// again (leftBehind) and retries.
				c.log.Warn("releasing a lease left in this owner's name failed", "shard", l.ShardID, "err", err)
			}
			continue
		}
		c.letGoOf(l.ShardID, nl.Counter)
		c.log.Info("lease left in this owner's name released", "shard", l.ShardID, "asked_by", l.PendingOwner)
	}
}

// leftover reports whether l is a lease listed in me's name that me
// neither holds (nor asked for: held has those too) nor plans to keep.
func leftover(me string, l lease.Lease, held, planned map[string]bool) bool {
	return l.Owner == me && !l.ForeignOwner && !held[l.Key] && !planned[l.Key]
}

// expired reports whether l's owner (or, released, the owner it is
// reserved for) has stopped: with members, a member owner by its entry,
// any other by the lease's counter.
func (c *Coordinator) expired(l lease.Lease, view memberView, now time.Time) bool {
	return ownerStopped(l, c.members != nil, view, func() bool { return c.obs.stale(l, now, c.cfg.Failover) })
}

// ownerStopped decides expired: with members (a member store is used),
// a member's liveness is its entry's (view); anyone else's, and a live
// member's released lease reserved for it, is judged by stale (asked only
// then): whether the lease's counter stood still for the failover time.
func ownerStopped(l lease.Lease, members bool, view memberView, stale func() bool) bool {
	if members {
		who := l.Owner
		if who == "" {
			who = l.PendingOwner
		}
		if _, member := view.all[who]; member && who != "" {
			if !view.live[who] {
				return true
			}
			if l.Owner != "" {
				return false // a live member's lease is written only when it changes
			}
		}
	}
	return stale()
}

// statusListEvery bounds the age of a status's Others while the status is
// read, at one listing per instance that often.
const statusListEvery = 5 * time.Second

// mustList reports whether a pass with liveness per instance must list the
// leases: see members.go.
func (c *Coordinator) mustList(view memberView) bool {
	c.mu.Lock()
	asked, compat, held, listedAt := len(c.pending), c.compat, len(c.owned), c.listedAt
	c.mu.Unlock()
	// Tracked whatever else lists, so that each shortfall is timed from
	// its own start. With the roster the counts of unwatched members are
	// as the last full read showed them: not judged.
	c.unheldSince = holdingSince(c.unheldSince, c.roster == nil && unheld(c.cfg.Owner, held, view, c.known), time.Now())
	if asked > 0 || compat || c.wantMore || len(c.awaiting) > 0 || c.leftBehind() || c.declaredPending() {
		return true
	}
	if c.statusRead.Load() && time.Since(listedAt) >= min(c.cfg.Failover, statusListEvery) {
		// Someone reads the status: its Others stay fresh, at one
		// listing per statusListEvery while it reads.
		return true
	}
	if c.roster == nil && deadLeftToJoiners(c.cfg.Owner, held, view, c.known, view.sent, c.cfg.Failover) {
		// The plans give a dead member's lease to a member that can
		// judge it dead (canJudge): maybe this one, at its share.
		return true
	}
	if !c.unheldSince.IsZero() && time.Since(c.unheldSince) >= c.cfg.overdueAfter() {
		// For longer than a handoff's release takes to show in the
		// taker's count (a listing by key costs a unit per lease).
		return true
	}
	return belowShare(c.cfg.Owner, held, view, c.known)
}

// holdingSince returns when a condition that holds at now began: start, or now
// if it did not hold before; zero while it does not hold.
func holdingSince(start time.Time, holds bool, now time.Time) time.Time {
	switch {
	case !holds:
		return time.Time{}
	case start.IsZero():
		return now
	}
	return start
}

// belowShare reports whether me, holding held leases, is below its share
// by the live members' own counts and the leases known (those not ended
// and released).
//
// Only an owner below its share, by the members' own counts and the
// leases it knows of, has anything to take or ask for: a joiner, the
// survivors of a dead or departed owner (its leases are in known, not in
// the live counts), one back from a partition or left short by a start
// whose views differed. The owners above their share learn of the
// requests from the askers' entries, without a listing, so a change of
// members costs a listing of those that act on it only.
func belowShare(me string, held int, view memberView, known map[string]lease.Lease) bool {
	load, sum, active := shareCounts(me, held, view, known)
	return held < shares(load, max(sum, active))[me]
}

// unheld reports whether, by the live members' own counts, fewer leases
// are held than known: a lease is free or held by the dead, and its
// planned taker may never take it (takeOverdue), so a pass lists although
// this owner is at its share.
func unheld(me string, held int, view memberView, known map[string]lease.Lease) bool {
	_, sum, active := shareCounts(me, held, view, known)
	return sum < active
}

// deadLeftToJoiners reports whether a lease known is held by a member the
// view judges dead while every other member below its share, by the live
// members' own counts, was first seen less than failover before at: none
// of those can judge the owner dead yet, so the plans give its lease to a
// member that can (planBulk), which lists at once rather than after
// overdueAfter (unheld). A release to a joiner (its asker) is not one:
// its owner is free, not dead, and the joiner takes it itself.
func deadLeftToJoiners(me string, held int, view memberView, known map[string]lease.Lease, at time.Time, failover time.Duration) bool {
	dead := false
	for _, l := range known {
		if _, member := view.all[l.Owner]; member && l.Owner != me && !view.live[l.Owner] && l.Checkpoint != lease.CheckpointShardEnd {
			dead = true
			break
		}
	}
	if !dead {
		return false
	}
	load, sum, active := shareCounts(me, held, view, known)
	target := shares(load, max(sum, active))
	for o, n := range load {
		if o != me && n < target[o] && !view.joinedWithin(o, at, failover) {
			return false
		}
	}
	return true
}

// shareCounts returns the live members' loads by their own counts (me at
// held), their sum, and the leases known not ended and released, less
// those held by leaving members (no one's to share).
func shareCounts(me string, held int, view memberView, known map[string]lease.Lease) (load map[string]int, sum, active int) {
	sum = held
	load = map[string]int{me: held}
	pinned := 0
	for owner, m := range view.all {
		switch {
		case owner == me || !view.live[owner]:
		case m.Leaving:
			pinned += m.Held
		default:
			sum += m.Held
			load[owner] = m.Held
		}
	}
	active = -pinned
	for _, l := range known {
		if l.Checkpoint != lease.CheckpointShardEnd || l.Owner != "" {
			active++
		}
	}
	return load, sum, active
}

// refreshParents reads again the unfinished parents of the held shards
// that wait for them: their owners write SHARD_END, which a pass without a
// listing would not see.
func (c *Coordinator) refreshParents(ctx context.Context, byShard map[string]lease.Lease) {
	for _, o := range c.snapshot() {
		if o.session() != nil {
			continue
		}
		o.mu.Lock()
		parents := o.l.ParentShardIDs
		o.mu.Unlock()
		for _, p := range parents {
			pl, ok := byShard[p]
			if !ok || pl.Checkpoint == lease.CheckpointShardEnd {
				continue
			}
			if got, err := c.cfg.Leases.Get(ctx, pl.Key); err == nil {
				byShard[p] = got
			}
		}
	}
}

// listLeases reads the namespace's leases: all of them (a List, which on
// DynamoDB scans the table) with liveness per lease and at the first pass;
// later, with a lease.Lookup, the leases of the shards this coordinator
// knows of (the last listing's and the stream's), read by key, so that
// nothing of another namespace in a shared table is read, unless the
// store says a List costs fewer read units than reading those leases by
// key (lease.ListCost: a read unit each on DynamoDB, where a Scan reads
// about ten leases a unit, so in a table of this namespace alone the List
// is about ten times cheaper). Both reads are strongly consistent; a List
// also returns the leases of shards this coordinator has not listed yet,
// as the first listing does. A lease another instance created for a shard
// this one has not listed yet is otherwise found by its next shard
// listing (createLease reads it).
//
// Only a List measures what a List costs, so while the last one measured
// dearer than the reads by key, a List re-measures now and then: after
// remeasureFirst listings by key, then twice as many each time up to
// remeasureMost, and from remeasureFirst again once a List measures
// cheaper. A table that shrank (the other namespaces' items gone) is
// Scanned again at most remeasureMost by-key listings later. A re-measure
// every N listings costs at most 1/N of a Scan more a listing on average
// (it stands in for that listing's reads by key): 5 re-measures in the
// first 248 by-key listings, then at most 1/256 of a Scan a listing.
func (c *Coordinator) listLeases(ctx context.Context, lin *Lineage) ([]lease.Lease, error) {
	if c.lookup == nil || c.known == nil || lin == nil {
		return c.cfg.Leases.List(ctx, c.cfg.Namespace)
	}
	ids := lin.IDs()
	keys := make([]string, 0, len(c.known)+len(ids))
	for id := range c.known {
		keys = append(keys, lease.KeyFor(c.cfg.Namespace, id))
	}
	for _, id := range ids {
		if _, ok := c.known[id]; !ok {
			keys = append(keys, lease.KeyFor(c.cfg.Namespace, id))
		}
	}
	if c.listCost != nil {
		if units, ok := c.listCost.ListUnits(c.cfg.Namespace); ok {
			if units < float64(len(keys)) {
				c.byKeyRun, c.remeasure = 0, 0
				return c.cfg.Leases.List(ctx, c.cfg.Namespace)
			}
			if c.remeasure == 0 {
				c.remeasure = remeasureFirst
			}
			if c.byKeyRun >= c.remeasure {
				ls, err := c.cfg.Leases.List(ctx, c.cfg.Namespace)
				if err == nil {
					c.byKeyRun, c.remeasure = 0, min(2*c.remeasure, remeasureMost)
				}
				return ls, err
			}
			c.byKeyRun++
		}
	}
	return c.lookup.GetMany(ctx, keys)
}

// While reading by key because the last List measured dearer, listLeases
// lists again to re-measure after remeasureFirst by-key listings, then
// after twice as many each time, up to remeasureMost.
const (
	remeasureFirst = 8
	remeasureMost  = 256
)

// heldKeys returns the keys of the leases this coordinator holds or has
// asked for, and of those it fenced while a handler still runs one of
// their records (fencedRunning: kept, as if held, until it returns): one
// map, so a pass costs O(listed + held), not their product.
func (c *Coordinator) heldKeys() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.owned)+len(c.pending))
	for key := range c.pending {
		out[key] = true
	}
	for _, o := range c.owned {
		out[o.key] = true
	}
	for id, f := range c.fenced {
		if c.fencedRunning(id) {
			out[f.key] = true
		}
	}
	return out
}
