package shard

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// callTimeout bounds one Kinesis call of a running reader: a connection that
// hangs is retried like any transient failure instead of stalling the shard.
const callTimeout = 30 * time.Second

// sinkRun is the most records a reader hands to its sink at once. Handing
// them over in runs takes the lanes' locks and wakes their workers once per
// run rather than once per record (in process, the CPU a drain costs next
// to a bare read loop went from 1/0.63 to 1/0.73 of it: BENCHMARKS.md); a
// run is small against a read of up to 10,000 records.
const sinkRun = 256

// recordWaiter is implemented by backends that can say when a shard has a
// record to read (the in-process Kinesis): a reader waits on it after an
// empty read instead of sleeping the poll interval.
type recordWaiter interface {
	WaitForRecords(ctx context.Context, shardIterator string) error
}

// read is the reader of one session: GetRecords in a loop, each record to
// the sink in shard order, until ctx ends (stop, seek, lost lease) or the
// shard ends.
func (c *Coordinator) read(ctx context.Context, o *owned, s *session, iter string) {
	defer c.workers.Done()
	defer close(s.done)
	log := c.log.With("shard", o.shard)
	st := o.st // where this shard's lag and outcomes are counted
	waiter, _ := c.cfg.Client.(recordWaiter)
	resume := s.from      // where a new iterator starts if this one expires
	opening := iter == "" // a lazy start: fetch the first iterator here
	bo := backoff{base: 100 * time.Millisecond, max: 10 * time.Second}
	limit := firstReadLimit(c.cfg.BatchSize)
	woken := false // the last wait was a waiter's wake-up
	f := c.newFeed(ctx, o, s)
	f.took = func(last *Record) { // a new iterator starts at it, skipping what was taken
		resume = startAt{typ: types.ShardIteratorTypeAtSequenceNumber, seq: last.SequenceNumber, skip: true, sub: last.SubSequence}
	}
	// byArrival, when a time cannot be opened on a closed shard (kinesalite
	// never answers AT_TIMESTAMP past a closed shard's last record, so the
	// shard would never end and its children never start), reads it from
	// its horizon instead and skips what arrived before the time: the same
	// records, by the service's own stamps.
	byArrival := func() bool {
		if resume.typ != types.ShardIteratorTypeAtTimestamp || !c.closedShard(o.shard) {
			return false
		}
		log.Debug("reading a closed shard from its horizon instead of AT_TIMESTAMP", "time", resume.ts)
		resume = startAt{typ: types.ShardIteratorTypeTrimHorizon, since: resume.ts}
		return true
	}
	for ctx.Err() == nil {
		if iter == "" {
			// No iterator (GetRecords answered none, or GetShardIterator
			// gave none): the end of the shard only if the stream says it
			// is closed; otherwise reopen where this reader stopped. A lazy
			// start opens here the first time.
			if !opening {
				if c.ended(ctx, o.shard) {
					c.finish(ctx, o, s, nil)
					return
				}
				log.Warn("no next iterator for a shard the stream lists open; reopening it", "at", string(resume.typ), "sequence", resume.seq)
				if !sleep(ctx, bo.next()) {
					return
				}
			}
			next, _, ierr := c.iterator(ctx, o.shard, resume)
			if ierr != nil {
				if ctx.Err() != nil {
					return
				}
				if c.gone(ctx, o.shard, ierr) {
					c.finishGone(ctx, o, s)
					return
				}
				if byArrival() {
					continue
				}
				st.readFailed(ierr)
				log.Warn("opening the shard failed; retrying", "at", string(resume.typ), "sequence", resume.seq, "time", resume.ts, "err", ierr)
				if opening {
					sleep(ctx, bo.next())
				}
				continue
			}
			opening = false
			if next == "" {
				continue
			}
			iter = next
			f.from(resume)
			continue
		}
		began := time.Now()
		out, err := c.getRecords(ctx, iter, limit)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			cl := classify(err)
			if cl != classExpired {
				st.readFailed(err) // an expired iterator is renewed, not a failure
			}
			switch cl {
			case classExpired:
				// Resume after the last delivered record, or where the
				// session opened if none was delivered yet.
				next, _, ierr := c.iterator(ctx, o.shard, resume)
				if ierr != nil {
					if ctx.Err() != nil {
						return
					}
					if c.gone(ctx, o.shard, ierr) {
						c.finishGone(ctx, o, s)
						return
					}
					if byArrival() {
						continue
					}
					st.readFailed(ierr)
					log.Warn("renewing an expired iterator failed; retrying", "err", ierr)
					sleep(ctx, bo.next())
					continue
				}
				log.Debug("iterator expired; renewed", "at", string(resume.typ), "sequence", resume.seq)
				iter = next
				f.from(resume)
			case classThrottle:
				log.Debug("GetRecords throttled; backing off", "err", err)
				sleep(ctx, bo.next())
			case classGone:
				if c.gone(ctx, o.shard, err) {
					c.finishGone(ctx, o, s)
					return
				}
				log.Warn("GetRecords failed; retrying", "err", err)
				sleep(ctx, bo.next())
			default:
				log.Warn("GetRecords failed; retrying", "err", err)
				sleep(ctx, bo.next())
			}
			continue
		}
		bo.reset()
		st.readAnswered()
		if out.MillisBehindLatest != nil {
			st.ObserveBehind(*out.MillisBehindLatest)
		}
		if !handOut(ctx, log, o, s, f, out.Records) {
			return
		}
		if out.NextShardIterator == nil {
			if len(out.ChildShards) > 0 {
				c.finish(ctx, o, s, out.ChildShards)
				return
			}
			iter = "" // the shard's end, or a faulty answer: see the loop's top
			continue
		}
		iter = *out.NextShardIterator
		n := len(out.Records)
		full := n >= int(limit)
		limit = nextReadLimit(c.cfg.BatchSize, limit, n, f.users)
		switch {
		case full:
			// A full read: more is waiting, read again at once.
			woken = false
		case n > 0 && aws.ToInt64(out.MillisBehindLatest) > 0:
			// Catching up: keep within the shard's 5 reads a second.
			sleep(ctx, minPoll-time.Since(began))
			woken = false
		case c.closedShard(o.shard):
			// Draining a closed shard: its end comes after an empty read or
			// two (kinesalite needs one more than the service).
			sleep(ctx, minPoll-time.Since(began))
		case waiter != nil && !(woken && n == 0):
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := waiter.WaitForRecords(wctx, iter); err != nil && ctx.Err() == nil && wctx.Err() == nil {
				sleep(ctx, c.cfg.Poll)
			}
			cancel()
			woken = true
		default:
			// Poll measured from the start of this read: one read per Poll
			// at most, and a record waits at most one Poll plus a round trip.
			sleep(ctx, c.cfg.Poll-time.Since(began))
			woken = false
		}
	}
}

// ended reports whether the stream says the shard is closed (an ending
// sequence number) or no longer has it: the last listing, else a fresh one.
// A shard the stream lists open has not ended, whatever an iterator said;
// nor has one whose state cannot be listed now.
func (c *Coordinator) ended(ctx context.Context, id string) bool {
	if c.closedShard(id) {
		return true
	}
	info, listed, err := c.listShard(ctx, id)
	return err == nil && (!listed || info.Closed)
}

// gone reports whether err says the shard does not exist and a fresh
// listing confirms it (not a deleted stream, whose listing fails): the shard
// is past the stream's retention, with nothing left to read. The KCL counts
// such a shard as read to its end too.
func (c *Coordinator) gone(ctx context.Context, id string, err error) bool {
	if classify(err) != classGone {
		return false
	}
	_, listed, lerr := c.listShard(ctx, id)
	if lerr != nil {
		// The listing fails too: the stream may be deleted. If so every
		// reader stops and the coordinator reports it.
		c.streamDeleted(ctx, "read", err)
		return false
	}
	return !listed
}

// listShard lists the stream now and returns one shard of it.
func (c *Coordinator) listShard(ctx context.Context, id string) (info Info, listed bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	shards, err := listShards(cctx, c.cfg.Client, c.cfg.Stream)
	if err != nil {
		c.log.Warn("listing shards to check a shard's state failed", "shard", id, "err", err)
		return Info{}, false, err
	}
	lin, err := NewLineage(shards)
	if err != nil {
		return Info{}, false, err
	}
	info, listed = lin.Shard(id)
	return info, listed, nil
}

// hashRange returns the hash-key range of o's shard from the last listing
// or its lease, nil if neither knows it.
func (c *Coordinator) hashRange(o *owned) *HashRange {
	c.mu.Lock()
	lin := c.lineage
	c.mu.Unlock()
	if lin != nil {
		if info, ok := lin.Shard(o.shard); ok && info.StartingHashKey != "" {
			return &info.Range
		}
	}
	o.mu.Lock()
	start, end := o.l.StartingHashKey, o.l.EndingHashKey
	o.mu.Unlock()
	info := Info{ID: o.shard}
	if start == "" || info.setRange(start, end) != nil {
		return nil
	}
	return &info.Range
}

// closedShard reports whether the last listing saw the shard closed.
func (c *Coordinator) closedShard(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lineage == nil {
		return false
	}
	info, ok := c.lineage.Shard(id)
	return ok && info.Closed
}

// finishGone ends a shard that no longer exists (past the stream's
// retention) as read to its end, so its children start.
func (c *Coordinator) finishGone(ctx context.Context, o *owned, s *session) {
	c.log.Warn("shard no longer exists (past the stream's retention); counted as read to its end", "shard", o.shard)
	c.finish(ctx, o, s, nil)
}

// finish ends a shard read to its end: once every delivered record has
// settled it checkpoints SHARD_END, records the children, releases the
// lease and asks for a sync pass so the children start now.
func (c *Coordinator) finish(ctx context.Context, o *owned, s *session, children []types.ChildShard) {
	log := c.log.With("shard", o.shard)
	log.Debug("shard ended; waiting for delivered records to settle", "pending", s.wm.pending())
	if err := s.wm.wait(ctx); err != nil {
		return // stopped, repositioned or lost meanwhile: the next reader ends it
	}
	if ctx.Err() != nil {
		return
	}
	// A refused write is retried while this reader lasts: dropping the
	// reader would read the parent again from its last checkpoint, and
	// handle again what settled since. A stop or handoff meanwhile ends
	// the reader and checkpoints its last record instead.
	bo := backoff{base: 50 * time.Millisecond, max: time.Second}
	var err error
	for {
		_, err = c.mutate(ctx, o, "lease checkpoint", func(l lease.Lease) (lease.Lease, error) {
			if s.wm.discard.Load() {
				return l, errNothing
			}
			nl, err := c.cfg.Leases.Checkpoint(ctx, l, lease.CheckpointShardEnd, 0)
			if err == nil {
				o.finished = true
				o.ended.Store(true)
			}
			return nl, err
		})
		if err == nil || errors.Is(err, errGone) || errors.Is(err, errNothing) || errors.Is(err, lease.ErrInvalid) {
			break
		}
		log.Warn("SHARD_END checkpoint failed; retrying", "err", err)
		if !sleep(ctx, bo.next()) {
			return // stopped or handed over: its final checkpoint is the last record
		}
	}
	if err != nil {
		// Lost, released or nothing to write end it here; a write the store
		// refuses as invalid (which retrying cannot mend) reads it again.
		if ctx.Err() == nil && errors.Is(err, lease.ErrInvalid) {
			log.Warn("SHARD_END checkpoint failed; the shard is read to its end again", "err", err)
			o.mu.Lock()
			if o.sess == s {
				o.setSession(nil) // the next pass reopens it from its checkpoint
			}
			o.mu.Unlock()
		}
		return
	}
	ids := make([]string, 0, 2)
	for _, ch := range children {
		ids = append(ids, aws.ToString(ch.ShardId))
	}
	if len(children) > 0 {
		// The server named the children: create their leases now, before
		// the next listing, so they can start at once.
		lin, lerr := NewLineage(nil)
		if lerr == nil {
			lerr = lin.AddChildren(children)
		}
		if lerr != nil {
			log.Warn("child shards not usable; the next listing finds them", "err", lerr)
		} else {
			for _, id := range lin.IDs() {
				info, _ := lin.Shard(id)
				if p, ok := c.unleasedParent(ctx, info, o.shard); !ok {
					// Leases are created parents first: a pass counts a
					// listed parent without a lease as read to its end
					// (startable), and creates no lease for a shard with a
					// leased child (missingLeases). A merge's child created
					// before its other parent (a split's child whose own
					// parent is still read) would be read before it.
					log.Debug("child lease left to the next listing: another parent has no lease yet", "child", id, "parent", p)
					continue
				}
				// Whether it is new or was there already, nothing here
				// needs the stored lease: the next pass lists it.
				if _, _, err := c.putLease(ctx, info, "", 0); err != nil {
					log.Warn("child lease not created; the next listing creates it", "child", id, "err", err)
				}
			}
		}
	} else if shards, err := listShards(ctx, c.cfg.Client, c.cfg.Stream); err == nil {
		if lin, err := NewLineage(shards); err == nil {
			ids = lin.Children(o.shard)
		}
	}
	if len(ids) > 0 {
		if _, err := c.mutate(ctx, o, "lease set-children", func(l lease.Lease) (lease.Lease, error) {
			return c.cfg.Leases.SetChildren(ctx, l, ids)
		}); err != nil {
			log.Warn("recording child shards failed", "err", err)
		}
	}
	if err := c.release(ctx, o); err != nil {
		log.Warn("releasing a finished lease failed", "err", err)
	}
	log.Info("shard read to its end", "children", ids)
	c.wake(true)
}

// unleasedParent returns a parent of child other than ended whose lease
// is not in the store (or could not be read), and false; true when each
// has one.
func (c *Coordinator) unleasedParent(ctx context.Context, child Info, ended string) (string, bool) {
	for _, p := range child.Parents {
		if p == ended {
			continue
		}
		if _, err := c.cfg.Leases.Get(ctx, lease.KeyFor(c.cfg.Namespace, p)); err != nil {
			return p, false
		}
	}
	return "", true
}

// firstReadLimit bounds a session's first read: until a read shows how many
// user records a Kinesis record holds, a read of BatchSize KPL aggregates
// could be a shard's whole backlog (hundreds of thousands of messages),
// whose handling would wait for all of it to arrive. A plain stream pays
// one small read more.
func firstReadLimit(batch int32) int32 { return min(batch, 10) }

// nextReadLimit sizes the next read so that it holds about batch user
// records: batch Kinesis records on a plain stream, fewer on one of KPL
// aggregates (as many as the last read's user records per record say).
// An empty read says nothing and keeps the limit.
func nextReadLimit(batch, limit int32, records, users int) int32 {
	switch {
	case records == 0:
		return limit
	case users <= records:
		return batch
	}
	return max(1, min(batch, int32(int64(batch)*int64(records)/int64(users))))
}

// getRecords is one GetRecords call of a reader, bounded like any Kinesis
// call, with the configured per-call options.
func (c *Coordinator) getRecords(ctx context.Context, iter string, limit int32) (*kinesis.GetRecordsOutput, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.cfg.Client.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(limit)}, c.cfg.GetRecordsOptions...)
}
