package shard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// pass is one round of shard sync: (re-)list the shards and create their
// leases, take leases per balancing, and start a reader for every held shard
// whose parents are finished. The first pass (from Start) returns every
// error; later passes are retried by the sync loop.
func (c *Coordinator) pass(ctx context.Context, relist bool) error {
	ctx, cancel := c.passScope(ctx)
	defer cancel()
	c.passMu.Lock()
	defer c.passMu.Unlock()
	if !c.running() {
		return nil
	}
	c.mu.Lock()
	lin := c.lineage
	c.mu.Unlock()
	var errs []error
	if relist || lin == nil {
		shards, err := listShards(ctx, c.cfg.Client, c.cfg.Stream)
		var fresh *Lineage
		if err == nil {
			fresh, err = NewLineage(shards)
		}
		switch {
		case err != nil && lin == nil:
			return &Error{Op: "ListShards", Stream: c.cfg.Stream, Err: err}
		case err != nil:
			// Leases are taken and held with the last listing: a Kinesis
			// outage must not keep a dead owner's shards from being taken.
			errs = append(errs, &Error{Op: "ListShards", Stream: c.cfg.Stream, Err: err})
			relist = false
		default:
			lin = fresh
			c.mu.Lock()
			c.lineage = lin
			c.mu.Unlock()
		}
	}
	leases, err := c.cfg.Leases.List(ctx, c.cfg.Namespace)
	if err != nil {
		return &Error{Op: "lease list", Stream: c.cfg.Stream, Err: err}
	}
	byShard := make(map[string]lease.Lease, len(leases))
	for _, l := range leases {
		byShard[l.ShardID] = l
	}
	if relist {
		// A subscription new to the stream that starts at Latest begins at
		// today's tip, as the KCL does: closed shards count as read and open
		// children start at their tip instead of their horizon.
		c.mu.Lock()
		fresh := len(leases) == 0 && c.start.Kind == Latest
		c.mu.Unlock()
		for _, id := range lin.IDs() {
			if _, ok := byShard[id]; ok {
				continue
			}
			info, _ := lin.Shard(id)
			checkpoint := ""
			switch {
			case fresh && info.Closed:
				checkpoint = lease.CheckpointShardEnd
			case fresh && lin.HasListedParent(id):
				checkpoint = lease.CheckpointLatest
			}
			l, err := c.createLease(ctx, info, checkpoint)
			if err != nil {
				return err
			}
			byShard[id] = l
			leases = append(leases, l)
		}
	}

	if relist {
		leases = c.dropExpiredLeases(ctx, lin, leases, byShard)
	}

	now := time.Now()
	c.obs.observe(leases, now)
	plan := planBalance(c.cfg.Owner, leases, c.holds, func(l lease.Lease) bool {
		return c.obs.stale(l, now, c.cfg.Failover)
	})
	spare := plan.spare
	for i := 0; i < len(plan.take); i++ {
		l := plan.take[i]
		nl, err := c.takeLease(ctx, l)
		switch {
		case errors.Is(err, lease.ErrLeaseLost):
			// Another instance was quicker (or the owner renewed after
			// all): try the next free lease now rather than next pass.
			if len(spare) > 0 && l.PendingOwner != c.cfg.Owner {
				plan.take = append(plan.take, spare[0])
				spare = spare[1:]
			}
		case err != nil:
			errs = append(errs, &Error{Op: "lease take", Stream: c.cfg.Stream, Shard: l.ShardID, Err: err})
		default:
			byShard[nl.ShardID] = nl
		}
	}
	if s := plan.steal; s != nil {
		if _, err := c.cfg.Leases.RequestHandoff(ctx, *s, c.cfg.Owner); err == nil {
			c.mu.Lock()
			c.pending[s.Key] = now
			c.mu.Unlock()
			c.log.Info("asked for a lease", "shard", s.ShardID, "from", s.Owner, "target", plan.target)
		} else if !errors.Is(err, lease.ErrLeaseLost) {
			errs = append(errs, &Error{Op: "lease handoff", Stream: c.cfg.Stream, Shard: s.ShardID, Err: err})
		}
	}

	held := c.snapshot()
	slices.SortFunc(held, func(a, b *owned) int { return strings.Compare(a.shard, b.shard) })
	for _, o := range held {
		o.mu.Lock()
		idle := o.sess == nil && !o.gone && !o.handing
		// (Not while its reader is still recording the children.)
		done := o.l.Checkpoint == lease.CheckpointShardEnd && !o.gone && !o.handing && (o.sess == nil || closed(o.sess.done))
		l := o.l
		o.mu.Unlock()
		if done {
			// Read to its end (its release failed, or an earlier run left it
			// held): nothing to read, let it go.
			if err := c.release(ctx, o); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if !idle {
			continue
		}
		from, ready := c.startable(l, lin, byShard)
		if !ready {
			continue
		}
		if err := c.open(ctx, o, from); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holds reports whether this coordinator holds, or has asked for, a lease.
func (c *Coordinator) holds(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[key]; ok {
		return true
	}
	for _, o := range c.owned {
		if o.key == key {
			return true
		}
	}
	return false
}

// createLease stores the lease of a newly found shard (or reads the one
// another instance created first).
func (c *Coordinator) createLease(ctx context.Context, info Info, checkpoint string) (lease.Lease, error) {
	l, created, err := c.putLease(ctx, info, checkpoint)
	if err != nil || created {
		return l, err
	}
	got, err := c.cfg.Leases.Get(ctx, l.Key)
	if err != nil {
		return lease.Lease{}, &Error{Op: "lease get", Stream: c.cfg.Stream, Shard: info.ID, Err: err}
	}
	return got, nil
}

// putLease stores the lease of a newly found shard unless one exists
// (created is false then, and l is the lease it would have stored).
func (c *Coordinator) putLease(ctx context.Context, info Info, checkpoint string) (l lease.Lease, created bool, err error) {
	l = lease.Lease{
		Key:             lease.KeyFor(c.cfg.Namespace, info.ID),
		ShardID:         info.ID,
		Checkpoint:      checkpoint,
		ParentShardIDs:  slices.Clone(info.Parents),
		StartingHashKey: info.StartingHashKey,
		EndingHashKey:   info.EndingHashKey,
	}
	created, err = c.cfg.Leases.Create(ctx, l)
	if err != nil {
		return lease.Lease{}, false, &Error{Op: "lease create", Stream: c.cfg.Stream, Shard: info.ID, Err: err}
	}
	if created {
		c.log.Debug("lease created", "shard", info.ID, "parents", info.Parents)
	}
	return l, created, nil
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
			return startAt{}, false // its lease is created on the next listing
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

// iterator gets a shard iterator, retrying throttling and transient errors a
// few times. An empty iterator means the shard has nothing left from there.
func (c *Coordinator) iterator(ctx context.Context, shardID string, at startAt) (string, error) {
	in := &kinesis.GetShardIteratorInput{
		StreamName:        aws.String(c.cfg.Stream),
		ShardId:           aws.String(shardID),
		ShardIteratorType: at.typ,
	}
	switch at.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		in.StartingSequenceNumber = aws.String(at.seq)
	case types.ShardIteratorTypeAtTimestamp:
		in.Timestamp = aws.Time(at.ts)
	}
	bo := backoff{base: 100 * time.Millisecond, max: 2 * time.Second}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		out, err := c.cfg.Client.GetShardIterator(cctx, in)
		cancel()
		if err == nil {
			return aws.ToString(out.ShardIterator), nil
		}
		if cl := classify(err); (cl == classThrottle || cl == classRetry) && attempt < 5 && ctx.Err() == nil && sleep(ctx, bo.next()) {
			continue
		}
		return "", &Error{Op: "GetShardIterator", Stream: c.cfg.Stream, Shard: shardID, Err: err}
	}
}

// open fetches the first iterator of o at from and starts its reader.
func (c *Coordinator) open(ctx context.Context, o *owned, from startAt) error {
	it, err := c.iterator(ctx, o.shard, from)
	if err != nil {
		if c.gone(ctx, o.shard, err) {
			// Nothing was read: there is nothing to settle.
			c.finishGone(ctx, o, &session{wm: newWatermark()})
			return nil
		}
		return err
	}
	sctx, cancel := context.WithCancel(c.ctx)
	s := &session{wm: newWatermark(), from: from, cancel: cancel, done: make(chan struct{})}
	o.mu.Lock()
	if o.gone || o.handing || o.fctx.Err() != nil {
		o.mu.Unlock()
		cancel()
		return nil
	}
	// A fence stops the reader and abandons its records at once.
	context.AfterFunc(o.fctx, func() {
		s.wm.abandon()
		cancel()
	})
	o.sess, o.persisted = s, 0
	o.mu.Unlock()
	c.log.Debug("reader started", "shard", o.shard, "at", string(from.typ), "sequence", from.seq)
	c.workers.Add(1)
	go c.read(sctx, o, s, it)
	return nil
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
		o.sess = nil
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
// it); a timestamp pins the first record at that time if there is one yet.
// Latest cannot be pinned before a record arrives (a later iterator at
// Latest is a later position): until one settles, a restart reads again
// from the old checkpoint, which duplicates records but loses none.
func (c *Coordinator) persistSeek(ctx context.Context, o *owned, at startAt) error {
	var pin string
	if at.typ == types.ShardIteratorTypeAtTimestamp {
		pin = c.firstAt(ctx, o.shard, at)
	}
	_, err := c.mutate(ctx, o, "lease checkpoint", func(l lease.Lease) (lease.Lease, error) {
		s := o.sess
		if s == nil || o.finished || s.wm.discard.Load() {
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
	it, err := c.iterator(ctx, shardID, at)
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
		if _, listed := lin.Shard(l.ShardID); listed || l.Checkpoint != lease.CheckpointShardEnd || l.Owner != "" {
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
