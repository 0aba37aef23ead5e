package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

const (
	// subscribeEvery is the service's limit: one SubscribeToShard per
	// second per shard per consumer. A reader never subscribes faster.
	subscribeEvery = time.Second
	// eventSilence ends a subscription that has sent no event for this
	// long (the connection is dead without saying so): the reader
	// subscribes again from its last continuation.
	eventSilence = time.Minute
	// endCheckEvery is how often, at most, a reader asks the polling API
	// whether a shard the stream lists closed, whose subscription goes on
	// with empty events, is read to its end (checkEnd).
	endCheckEvery = 5 * time.Second
	// endCheckReads bounds the GetRecords calls of one such check.
	endCheckReads = 3
)

// readFanOut is the reader of one session by enhanced fan-out: it
// subscribes to the shard (SubscribeToShard) where the session opened and
// hands each event's records to the sink in shard order, exactly as read
// does with GetRecords (KPL aggregates expanded, the in-flight bound, the
// watermark). A subscription ends every 5 minutes by design, and on
// network faults: the reader then subscribes again after the last event's
// ContinuationSequenceNumber, so a cut mid-event loses nothing (the SDK
// hands over whole events only) and repeats nothing delivered. At the
// shard's end (an event with ChildShards, or none with a nil continuation)
// the shard is finished as in polling. A subscription that goes on with
// empty events past the end of a shard the stream lists closed (kinesis-mock
// never ends one) is checked with the polling API, at most every
// endCheckEvery (checkEnd). It returns when ctx ends (stop, handoff, seek,
// lost lease), which also closes the subscription at once.
func (c *Coordinator) readFanOut(ctx context.Context, o *owned, s *session) {
	defer c.workers.Done()
	defer close(s.done)
	log := c.log.With("shard", o.shard)
	// resume is where the next subscription starts: the session's opening,
	// then after the last event's continuation.
	resume := s.from
	f := c.newFeed(ctx, o, s) // skips what was settled before s opened
	bo := backoff{base: 100 * time.Millisecond, max: 10 * time.Second, site: "fan-out", shard: o.shard}
	var last time.Time    // when the last SubscribeToShard was sent
	var checked time.Time // when the end of the closed shard was last checked
	checkDue := func() bool { return time.Since(checked) >= endCheckEvery && c.closedShard(o.shard) }
	for ctx.Err() == nil {
		if !last.IsZero() && !sleep(ctx, subscribeEvery-time.Since(last)) {
			return
		}
		last = time.Now()
		sub, closeSub, err := c.subscribe(ctx, o.shard, resume)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			o.st.readFailed(err) // refused, in use or throttled: each is worth seeing if it goes on
			switch classifySubscribe(err) {
			case subscribeInUse:
				// The shard's previous subscription (this consumer's, by a
				// former owner, frozen maybe, or an earlier session) has
				// not ended yet. The service refuses a second one within
				// 5 s of the first and lets it take over after that, so
				// ask at the most the service allows, once a second: a
				// backoff would overshoot the takeover by seconds.
				log.Debug("shard still subscribed elsewhere; retrying", "err", err)
				sleep(ctx, subscribeEvery)
			case subscribeThrottled:
				log.Debug("SubscribeToShard throttled; backing off", "err", err)
				sleep(ctx, max(bo.next(), subscribeEvery))
			case subscribeGone:
				if c.gone(ctx, o.shard, err) {
					c.finishGone(ctx, o, s)
					return
				}
				if c.Err() != nil || c.consumerDeleted(ctx, err) {
					return // reported through Err and OnFail
				}
				log.Warn("SubscribeToShard failed; retrying", "err", err)
				sleep(ctx, bo.next())
			default:
				log.Warn("SubscribeToShard failed; retrying", "at", string(resume.typ), "sequence", resume.seq, "err", err)
				sleep(ctx, bo.next())
			}
			continue
		}
		end, children, cont, err := c.consume(sub, f.deliver, o.st, checkDue)
		closeSub()
		if cont != "" {
			resume = startAt{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: cont}
			bo.reset()
		}
		switch {
		case ctx.Err() != nil || errors.Is(err, errFenced):
			return
		case errors.Is(err, errSink):
			sinkFailed(log, o, s, err)
			return
		case errors.Is(err, errCheckEnd):
			checked = time.Now()
			var done bool
			if resume, done = c.checkEnd(ctx, o, s, f, resume); done {
				return
			}
		case end && (len(children) > 0 || c.ended(ctx, o.shard)):
			c.finish(ctx, o, s, children)
			return
		case end:
			log.Warn("subscription ended the shard, which the stream lists open; subscribing again", "after", cont)
		case err != nil && classifySubscribe(err) == subscribeInUse && !c.stillHeld(ctx, o):
			// Taken over: another subscribed to the shard for this
			// consumer, the lease's new owner as it turns out.
			return
		case err != nil:
			o.st.readFailed(err)
			log.Warn("subscription broke off; subscribing again", "after", resume.seq, "err", err)
		default:
			log.Debug("subscription ended; subscribing again", "after", resume.seq)
		}
	}
}

// stillHeld reports, for a reader whose subscription another subscription
// took over, whether this owner still holds o's lease as the store has it.
// The service lets a subscription to the shard for the same consumer take
// over one 5 s old; the lease's new owner does so when this owner was
// frozen. Subscribing again would take the shard back from that owner 5 s
// later, and so on, each reading what the other had read. A lease another
// owner holds is let go here (lost) and the reader stops; one the store
// cannot be asked about now counts as held (the fence still bounds it).
func (c *Coordinator) stillHeld(ctx context.Context, o *owned) bool {
	gctx, cancel := context.WithTimeout(ctx, c.cfg.leaseCallTimeout())
	cur, err := c.cfg.Leases.Get(gctx, o.key)
	cancel()
	switch {
	case errors.Is(err, lease.ErrNotFound):
		cur = lease.Lease{Counter: math.MaxInt64}
	case err != nil || cur.Owner == c.cfg.Owner:
		return true
	}
	c.log.Warn("fan-out subscription taken over and the lease held by another owner; letting it go", "shard", o.shard, "owner", cur.Owner)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stateNow() != stGone {
		c.letGoOf(o.shard, cur.Counter)
		c.loseLocked(o, cur.Owner)
	}
	return false
}

// errSink marks a failure of the sink (not of the subscription) in consume.
var errSink = errors.New("sink")

// errCheckEnd ends consume at an empty event when the shard's end is to be
// checked (checkEnd).
var errCheckEnd = errors.New("empty event on a closed shard")

// checkEnd asks the polling API whether the shard, which the stream lists
// closed while its subscription goes on with empty events, is read to its
// end from at (the last event's continuation): GetShardIterator there and
// GetRecords, up to endCheckReads times. Records it finds are delivered as
// the subscription's would be, and the shard ends where a read answers no
// next iterator, as in polling. The service ends such a subscription itself
// (an event with ChildShards); kinesis-mock never does, and without this
// the children of a parent read by fan-out would never start. It returns
// where the next subscription starts (after the records it delivered) and
// done when the reader is to return: the shard finished, ctx ended, the
// lease fenced or the sink failed. Any failed call leaves the check to the
// next one: the subscription goes on meanwhile.
func (c *Coordinator) checkEnd(ctx context.Context, o *owned, s *session, f *feed, at startAt) (next startAt, done bool) {
	log := c.log.With("shard", o.shard)
	it, _, err := c.iterator(ctx, o.shard, at)
	for reads := 0; err == nil && it != "" && reads < endCheckReads; reads++ {
		if reads > 0 && !sleep(ctx, minPoll) {
			return at, true
		}
		var out *kinesis.GetRecordsOutput
		if out, err = c.getRecords(ctx, it, firstReadLimit(c.cfg.BatchSize)); err != nil {
			break
		}
		if !handOut(ctx, log, o, s, f, out.Records) {
			return at, true
		}
		if n := len(out.Records); n > 0 {
			at = startAt{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: aws.ToString(out.Records[n-1].SequenceNumber)}
		}
		if out.NextShardIterator == nil {
			if len(out.ChildShards) > 0 || c.ended(ctx, o.shard) {
				log.Debug("closed shard's subscription went on past its end; ended by GetRecords")
				c.finish(ctx, o, s, out.ChildShards)
				return at, true
			}
			break
		}
		it = *out.NextShardIterator
	}
	if ctx.Err() != nil {
		return at, true
	}
	if err != nil {
		log.Warn("checking the end of a closed shard failed; subscribing again", "after", at.seq, "err", err)
	}
	return at, false
}

// subscribe opens a subscription of the shard at at. Its first answer is
// bounded like any Kinesis call; the events that follow are not. The call
// has a protocol of its own (the SDK client's shared one races between
// subscriptions), tells a cut connection from a clean end, and decodes
// events without the SDK's per-record cost (wire.FastSubscribeToShard). end
// closes the subscription and ends its call (and so its HTTP/2 stream);
// ctx ending does the same.
func (c *Coordinator) subscribe(ctx context.Context, shardID string, at startAt) (st *kinesis.SubscribeToShardEventStream, end func(), err error) {
	pos := &types.StartingPosition{Type: at.typ}
	switch at.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		pos.SequenceNumber = aws.String(at.seq)
	case types.ShardIteratorTypeAtTimestamp:
		pos.Timestamp = aws.Time(at.ts)
	}
	sctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.cfg.kinesisCallTimeout(), cancel)
	out, err := c.fanOut.SubscribeToShard(sctx, &kinesis.SubscribeToShardInput{
		ConsumerARN:      aws.String(c.cfg.ConsumerARN),
		ShardId:          aws.String(shardID),
		StartingPosition: pos,
	}, wire.FastSubscribeToShard)
	if err == nil {
		st = out.GetStream()
	}
	switch {
	case !timer.Stop() && err == nil:
		err = context.DeadlineExceeded // answered just as the deadline passed
	case err == nil && st == nil:
		err = errors.New("no event stream in the answer")
	}
	if err != nil {
		if st != nil {
			_ = st.Close()
		}
		cancel()
		return nil, nil, &Error{Op: "SubscribeToShard", Stream: c.cfg.Stream, Shard: shardID, Err: err}
	}
	stop := context.AfterFunc(sctx, func() { _ = st.Close() })
	return st, func() {
		stop()
		_ = st.Close()
		cancel()
	}, nil
}

// consume reads one subscription's events until it ends: each event's
// records go to deliver, in order. It returns the last event's
// continuation ("" when none came), whether the shard ended (an event with
// ChildShards or without a continuation), and why the subscription broke
// off (nil when it simply ended; errSink wrapped when deliver failed;
// errCheckEnd after an empty event when checkDue says the shard's end is to
// be checked). Each event is a read that answered, observed in stats.
func (c *Coordinator) consume(st *kinesis.SubscribeToShardEventStream, deliver func([]types.Record) error, stats *Stats, checkDue func() bool) (end bool, children []types.ChildShard, cont string, err error) {
	silence := time.AfterFunc(eventSilence, func() { _ = st.Close() })
	defer silence.Stop()
	for ev := range st.Events() {
		silence.Reset(eventSilence)
		e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !ok {
			continue
		}
		stats.readAnswered()
		if derr := deliver(e.Value.Records); derr != nil {
			return false, nil, cont, fmt.Errorf("%w: %w", errSink, derr)
		}
		if e.Value.MillisBehindLatest != nil {
			stats.ObserveBehind(*e.Value.MillisBehindLatest)
		}
		if e.Value.ContinuationSequenceNumber == nil || len(e.Value.ChildShards) > 0 {
			return true, e.Value.ChildShards, cont, nil
		}
		cont = *e.Value.ContinuationSequenceNumber
		if len(e.Value.Records) == 0 && checkDue() {
			return false, nil, cont, errCheckEnd
		}
	}
	if err := st.Err(); err != nil {
		return false, nil, cont, err
	}
	if !silence.Stop() {
		return false, nil, cont, fmt.Errorf("no event for %v", eventSilence)
	}
	return false, nil, cont, nil
}

type subscribeClass int

const (
	subscribeRetry subscribeClass = iota
	subscribeInUse
	subscribeThrottled
	subscribeGone
)

func classifySubscribe(err error) subscribeClass {
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return subscribeInUse
	}
	switch classify(err) {
	case classThrottle:
		return subscribeThrottled
	case classGone:
		return subscribeGone
	}
	return subscribeRetry
}

// consumerDeleted checks, after a subscription was refused as not found,
// whether the stream consumer itself is gone (or being deleted). If so the
// coordinator stops reading for good, as for a deleted stream: the
// subscription cannot read without it, and re-registering one that someone
// deregistered on purpose is not the runtime's call.
func (c *Coordinator) consumerDeleted(ctx context.Context, cause error) bool {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.kinesisCallTimeout())
	defer cancel()
	out, err := c.fanOut.DescribeStreamConsumer(cctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: aws.String(c.cfg.ConsumerARN)})
	switch {
	case err != nil && classify(err) == classGone:
	case err == nil && out.ConsumerDescription != nil && out.ConsumerDescription.ConsumerStatus == types.ConsumerStatusDeleting:
	default:
		return false
	}
	c.stopReading("SubscribeToShard", fmt.Errorf("%w: %s: %w", ErrConsumerDeleted, c.cfg.ConsumerARN, cause))
	return true
}
