package shard

import (
	"context"
	"errors"
	"log/slog"
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
// shard ends. Without an iterator it opens one (reopen); a failed read is
// retried or renews the iterator (failed); a read's records go to the sink
// and its answer says whether the shard ended (delivered); then it waits
// as pace decides.
func (c *Coordinator) read(ctx context.Context, o *owned, s *session, iter string) {
	defer c.workers.Done()
	defer close(s.done)
	r := c.newReader(ctx, o, s, iter)
	for ctx.Err() == nil {
		if r.iter == "" {
			if !r.reopen(ctx) {
				return
			}
			continue
		}
		began := time.Now()
		out, err := c.getRecords(ctx, r.iter, r.limit)
		if err != nil {
			if !r.failed(ctx, err) {
				return
			}
			continue
		}
		goOn, next := r.delivered(ctx, out)
		if !goOn {
			return
		}
		if next {
			r.wait(ctx, began, out)
		}
	}
}

// reader is the state of one session's read loop.
type reader struct {
	c       *Coordinator
	o       *owned
	s       *session
	log     *slog.Logger
	st      *Stats // where this shard's lag and outcomes are counted
	waiter  recordWaiter
	iter    string  // the next read's iterator; empty: open one
	resume  startAt // where a new iterator starts if this one expires
	opening bool    // a lazy start: fetch the first iterator here
	bo      backoff
	limit   int32
	woken   bool // the last wait was a waiter's wake-up
	f       *feed
}

func (c *Coordinator) newReader(ctx context.Context, o *owned, s *session, iter string) *reader {
	r := &reader{c: c, o: o, s: s, log: c.log.With("shard", o.shard), st: o.st, iter: iter,
		resume: s.from, opening: iter == "",
		bo:    backoff{base: 100 * time.Millisecond, max: 10 * time.Second, site: "read", shard: o.shard},
		limit: firstReadLimit(c.cfg.BatchSize)}
	r.waiter, _ = c.cfg.Client.(recordWaiter)
	r.f = c.newFeed(ctx, o, s)
	r.f.took = func(last *Record) { // a new iterator starts at it, skipping what was taken
		r.resume = startAt{typ: types.ShardIteratorTypeAtSequenceNumber, seq: last.SequenceNumber, skip: true, sub: last.SubSequence}
	}
	return r
}

// byArrival, when a time cannot be opened on a closed shard (kinesalite
// never answers AT_TIMESTAMP past a closed shard's last record, so the
// shard would never end and its children never start), reads it from its
// horizon instead and skips what arrived before the time: the same
// records, by the service's own stamps.
func (r *reader) byArrival() bool {
	if r.resume.typ != types.ShardIteratorTypeAtTimestamp || !r.c.closedShard(r.o.shard) {
		return false
	}
	r.log.Debug("reading a closed shard from its horizon instead of AT_TIMESTAMP", "time", r.resume.ts)
	r.resume = startAt{typ: types.ShardIteratorTypeTrimHorizon, since: r.resume.ts}
	return true
}

// reopen handles a missing iterator (GetRecords answered none, or
// GetShardIterator gave none): the end of the shard only if the stream
// says it is closed; otherwise it reopens where this reader stopped. A
// lazy start opens here the first time. It reports whether the reader
// goes on.
func (r *reader) reopen(ctx context.Context) bool {
	c, o, s := r.c, r.o, r.s
	if !r.opening {
		if c.ended(ctx, o.shard) {
			c.finish(ctx, o, s, nil)
			return false
		}
		r.log.Warn("no next iterator for a shard the stream lists open; reopening it", "at", string(r.resume.typ), "sequence", r.resume.seq)
		if !sleep(ctx, r.bo.next()) {
			return false
		}
	}
	next, _, ierr := c.iterator(ctx, o.shard, r.resume)
	if ierr != nil {
		return r.iteratorFailed(ctx, ierr, r.opening, "opening the shard failed; retrying",
			"at", string(r.resume.typ), "sequence", r.resume.seq, "time", r.resume.ts)
	}
	r.opening = false
	if next == "" {
		return true
	}
	r.iter = next
	r.f.from(r.resume)
	return true
}

// iteratorFailed handles a failed GetShardIterator: a shard that no
// longer exists is ended; an AT_TIMESTAMP open of a closed shard is
// retried at once from its horizon (byArrival); anything else is counted,
// logged and retried, after a backoff when wait is set. It reports
// whether the reader goes on.
func (r *reader) iteratorFailed(ctx context.Context, err error, wait bool, msg string, attrs ...any) bool {
	if ctx.Err() != nil {
		return false
	}
	if r.c.gone(ctx, r.o.shard, err) {
		r.c.finishGone(ctx, r.o, r.s)
		return false
	}
	if r.byArrival() {
		return true
	}
	r.st.readFailed(err)
	r.log.Warn(msg, append(attrs, "err", err)...)
	if wait {
		sleep(ctx, r.bo.next())
	}
	return true
}

// failed handles a failed GetRecords: an expired iterator is renewed, a
// throttled or failed read retried after a backoff, a shard that no
// longer exists ended. It reports whether the reader goes on.
func (r *reader) failed(ctx context.Context, err error) bool {
	c, o, s := r.c, r.o, r.s
	if ctx.Err() != nil {
		return false
	}
	cl := classify(err)
	if cl != classExpired {
		r.st.readFailed(err) // an expired iterator is renewed, not a failure
	}
	switch cl {
	case classExpired:
		// Resume after the last delivered record, or where the
		// session opened if none was delivered yet.
		next, _, ierr := c.iterator(ctx, o.shard, r.resume)
		if ierr != nil {
			return r.iteratorFailed(ctx, ierr, true, "renewing an expired iterator failed; retrying")
		}
		r.log.Debug("iterator expired; renewed", "at", string(r.resume.typ), "sequence", r.resume.seq)
		r.iter = next
		r.f.from(r.resume)
	case classThrottle:
		r.log.Debug("GetRecords throttled; backing off", "err", err)
		sleep(ctx, r.bo.next())
	case classGone:
		if c.gone(ctx, o.shard, err) {
			c.finishGone(ctx, o, s)
			return false
		}
		r.log.Warn("GetRecords failed; retrying", "err", err)
		sleep(ctx, r.bo.next())
	default:
		r.log.Warn("GetRecords failed; retrying", "err", err)
		sleep(ctx, r.bo.next())
	}
	return true
}

// delivered hands a read's records to the sink and takes its next
// iterator: none (r.iter empty) at the shard's end or in a faulty answer,
// which reopen sorts out at once. It reports whether the reader goes on,
// and whether the answer had a next iterator (then it waits first).
func (r *reader) delivered(ctx context.Context, out *kinesis.GetRecordsOutput) (goOn, next bool) {
	r.bo.reset()
	r.st.readAnswered()
	if out.MillisBehindLatest != nil {
		r.st.ObserveBehind(*out.MillisBehindLatest)
	}
	if !handOut(ctx, r.log, r.o, r.s, r.f, out.Records) {
		return false, false
	}
	if out.NextShardIterator == nil {
		if len(out.ChildShards) > 0 {
			r.c.finish(ctx, r.o, r.s, out.ChildShards)
			return false, false
		}
		r.iter = "" // the shard's end, or a faulty answer: see reopen
		return true, false
	}
	r.iter = *out.NextShardIterator
	return true, true
}

// wait waits before the next read, as pace decides, and sizes it.
func (r *reader) wait(ctx context.Context, began time.Time, out *kinesis.GetRecordsOutput) {
	c := r.c
	n := len(out.Records)
	full := n >= int(r.limit)
	r.limit = nextReadLimit(c.cfg.BatchSize, r.limit, n, r.f.users)
	p := pace(full, n, aws.ToInt64(out.MillisBehindLatest), func() bool { return c.closedShard(r.o.shard) }, r.waiter != nil, r.woken)
	switch p {
	case paceAgain:
	case paceShardRate, paceDrain:
		sleep(ctx, minPoll-time.Since(began))
	case paceWaiter:
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := r.waiter.WaitForRecords(wctx, r.iter); err != nil && ctx.Err() == nil && wctx.Err() == nil {
			sleep(ctx, c.cfg.Poll)
		}
		cancel()
	case pacePoll:
		sleep(ctx, c.cfg.Poll-time.Since(began))
	}
	r.woken = p.woken(r.woken)
}

// pacing is how a reader waits before its next read.
type pacing int

const (
	paceAgain     pacing = iota // a full read: more is waiting, read again at once
	paceShardRate               // catching up: within the shard's 5 reads a second (minPoll) from the last read's start
	paceDrain                   // draining a closed shard: as paceShardRate
	paceWaiter                  // until the backend says a record is there (recordWaiter), up to a minute
	pacePoll                    // Poll from the last read's start
)

// woken is the reader's "last wait was a waiter's wake-up" after a wait
// of p, given what it was before.
func (p pacing) woken(before bool) bool {
	switch p {
	case paceWaiter:
		return true
	case paceDrain:
		return before
	}
	return false
}

// pace decides how a reader waits after a read of n records (full: as
// many as it asked for) that left it behind ms behind the tip. closed
// (asked only when it decides) reports whether the shard is closed;
// canWait whether the backend can say when a record arrives; woken
// whether the last wait was such a wake-up.
func pace(full bool, n int, behind int64, closed func() bool, canWait, woken bool) pacing {
	switch {
	case full:
		return paceAgain
	case n > 0 && behind > 0:
		// Catching up: keep within the shard's 5 reads a second.
		return paceShardRate
	case closed():
		// Draining a closed shard: its end comes after an empty read or
		// two (kinesalite needs one more than the service).
		return paceDrain
	case canWait && !(woken && n == 0):
		return paceWaiter
	}
	// Poll measured from the start of this read: one read per Poll at
	// most, and a record waits at most one Poll plus a round trip.
	return pacePoll
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
	bo := backoff{base: 50 * time.Millisecond, max: time.Second, site: "end checkpoint", shard: o.shard}
	var err error
	for {
		_, err = c.mutate(ctx, o, "lease checkpoint", func(l lease.Lease) (lease.Lease, error) {
			if s.wm.discard.Load() || !s.wm.settledAll() {
				// Abandoned, or records skipped unsettled (wait ends
				// for a closed generation's skipped records too): a
				// lane left them stale, past the lease's fence by the
				// clock before its timer ran, or Stop's end. The end
				// is not reached: the next reader reads them again.
				return l, errNothing
			}
			nl, err := c.cfg.Leases.Checkpoint(ctx, l, lease.CheckpointShardEnd, 0)
			if err == nil {
				o.end()
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
				o.unread() // the next pass reopens it from its checkpoint
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
