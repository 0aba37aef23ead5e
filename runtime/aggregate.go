package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	goruntime "runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/jsonenc"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// DefaultAggregateBytes is the default bound on one aggregated record, the
// KPL's own default (AggregationMaxSize): two 25 KiB PUT payload units.
const DefaultAggregateBytes = 50 << 10

// Aggregation packs a publisher's messages into KPL-aggregated records:
// many messages per Kinesis record, in the format the Java KPL writes and
// every KCL (and this runtime's subscribers) reads. The zero value takes
// the defaults.
//
// An aggregate holds only messages whose partition keys hash into the
// same open shard, and is put with an ExplicitHashKey in that shard's
// range, so each message is read on the shard its own key maps to, under
// its own key. A key's messages are in at most one unresolved aggregate at
// a time (up to four aggregates of a shard are in flight, holding other
// keys), so they keep their publish order across aggregates and retries; a
// message whose key is in an aggregate sealed or in flight waits for it,
// holding back no other key.
// The shard map comes from ListShards and is listed again when an
// aggregate lands on a shard other than the one it was sent to (the stream
// was resharded): unless that shard holds all its keys, the aggregate's
// messages are sent again to their keys' new shards, before any later
// message of those keys. A reader that drops an aggregate holding a key of
// another shard reads each message once; one that skips only those
// sub-records (this runtime's subscribers) may read the others twice (at
// least once). A put that finds no stream is an ErrStream error for its
// messages, and the shard map is dropped: the next messages wait for a
// listing, which fails them while the stream is gone and routes them by
// the new shards if it is created again. A stream deleted and created
// again while the publisher is idle fails no put, and the new stream's
// shards may bear the old ids with other ranges: a publisher whose map
// was last known to be right a second ago or more lists the shards again
// before routing, and an aggregate answered later than that is settled
// by a listing, as one that landed elsewhere is (a reader that checks no
// ranges reads the messages of an aggregate sent again twice). A listing
// the service refuses for good (an identity not allowed to list shards, say) fails the
// messages waiting for it, as a refused put would. A message too
// large to share a record with another is sent plain, in its place in its
// key's order.
//
// With the default codec (JSON), a lone Publish's message is encoded by
// the aggregator, in one pass with the other callers' (less CPU than on
// each caller's goroutine): the call still returns its own encoding error,
// and a MarshalJSON that panics panics in its caller, but one that blocks
// holds back the publisher's other messages while it does (one that
// publishes through an aggregating publisher of the same stream and
// settings waits for its own aggregator: until its ctx ends). Another codec
// runs on the caller's goroutine, as do the batches (SendAll, StartAll,
// PublishAll).
//
// On a stream whose record distribution strategy is AUTO the service
// places every record on a shard of its choosing, ignoring partition and
// explicit hash keys: the publisher does not pretend to route keys. It
// packs messages into aggregates whatever their keys, puts them without
// an ExplicitHashKey and takes them as stored wherever they land (readers
// of an AUTO stream filter no sub-record by hash range). It reads the
// strategy with each shard listing and every aggDistributionEvery, and a
// switch re-routes what is queued, as a reshard does; a key's messages
// keep their publish order across aggregates either way.
type Aggregation struct {
	// MaxBytes bounds one aggregated record, data plus partition key
	// (default DefaultAggregateBytes; at most MaxRecordSize, whatever the
	// stream's own record size: an aggregate stays readable by consumers
	// that predate large records). A message too large for it is sent
	// plain, up to the stream's record size.
	MaxBytes int
	// Linger is how long the messages of a shard with nothing in flight
	// wait for more before they are sent (default 0: at once; but for up
	// to 2 ms after the shard's last aggregate came back, while fewer are
	// queued than it held, they wait for the callers it woke). While a
	// shard's aggregate is in flight its next one fills regardless (for up
	// to InFlightWait, or Linger if longer), so aggregates grow with the
	// load without any linger.
	Linger time.Duration
	// InFlightWait bounds how long a shard's next aggregate fills while
	// one of the shard's is in flight, before it is sent beside it
	// (default 100 ms); negative: it does not wait for the one in flight,
	// and goes as soon as it has lingered. Waiting makes fuller aggregates
	// (fewer records and PUT payload units); not waiting halves the
	// latency of a caller that waits for each result, when few callers
	// share a high-latency link, for two to three times the PUT payload
	// units (BENCHMARKS.md, 'Waiting for the aggregate in flight').
	InFlightWait time.Duration
}

func (a Aggregation) withDefaults() Aggregation {
	if a.MaxBytes <= 0 {
		a.MaxBytes = DefaultAggregateBytes
	}
	a.MaxBytes = min(a.MaxBytes, MaxRecordSize)
	if a.Linger < 0 {
		a.Linger = 0
	}
	switch {
	case a.InFlightWait == 0:
		a.InFlightWait = aggOpenWait
	case a.InFlightWait < 0:
		a.InFlightWait = 0
	}
	return a
}

// WithAggregation makes the publisher pack its messages into KPL-aggregated
// records, as the aggregate key of //kinesis:message does (see
// Aggregation). Publishing code does not change: each Publish still
// returns its own message's result, and Send's Receipt names the
// aggregate's shard and sequence number and the message's SubSequence in
// it. Plain and aggregating publishers can share a stream.
func WithAggregation(a Aggregation) PublishOption {
	return func(s *publishSettings) { s.aggregate = &a }
}

// WithoutAggregation makes the publisher put each message in a Kinesis
// record of its own, though its type's marker says aggregate: for a path
// where one round trip per publish matters more than the records and PUT
// payload units aggregates save. Of WithAggregation and
// WithoutAggregation the last given wins.
func WithoutAggregation() PublishOption {
	return func(s *publishSettings) { s.aggregate = nil }
}

// aggKey names one aggregator of a connection: a stream and its settings.
type aggKey struct {
	stream string
	cfg    Aggregation
}

// aggregator packs one stream's aggregated publishes into KPL aggregates,
// per shard, and hands them to the stream's batcher. One goroutine (run)
// owns the shard map and the queues; each aggregate in flight has a
// goroutine that waits for its batcher entry.
//
// The messages are *entry values like plain publishes, so callers wait for
// them the same way: queued (not yet in an aggregate sent), in flight, or
// abandoned by a caller whose ctx ended while queued.
//
// Order: a key's messages are in at most one unresolved unit (aggregate or
// plain record) of its shard at a time. A message whose key is in a unit
// that is sealed or in flight waits in its key's line (aggKeyRef.line) and
// is routed when that unit resolves, into the shard's open unit; so units
// never share a key, any of them can go without waiting for another, and a
// busy key holds back only its own messages (the batcher's rule for plain
// records).
type aggregator struct {
	bt     *batcher
	client kinesisapi.API
	stream string
	cfg    Aggregation
	log    *slog.Logger

	ctx    context.Context // ends when the aggregator is done: bounds ListShards
	cancel context.CancelFunc

	mu       sync.Mutex
	incoming []*entry
	closing  bool
	wake     chan struct{}

	results chan aggResult
	done    chan struct{}

	// Owned by run.
	unrouted []*entry    // waiting for a shard map, in arrival order
	shards   []*aggShard // open shards, by range start; nil before the first listing
	inFlight int
	stale    bool          // an aggregate landed on a shard it was not sent to: list again
	staleRun int           // aggregates misplaced since one landed where it was sent
	trust    time.Duration // aggMapTrust
	listFail int           // consecutive failed listings
	listAt   time.Time     // when the next listing may run
	// confirmedAt is a time at which the stream was the one the shard map
	// was listed from: the start of that listing, or the send of an
	// aggregate known to be stored in that stream. A put answered less
	// than aggMapTrust after it was processed in that stream too (see
	// aggMapTrust); a later one is checked by a listing.
	confirmedAt time.Time
	// pending are aggregates answered too late after confirmedAt to be
	// trusted: stored on the shard they were sent to, unless the stream
	// was created again meanwhile. Their keys stay busy until a listing
	// started after their answers settles them (verify).
	pending []*aggUnit
	// auto: the stream was AUTO at the last look (shards is then one bin
	// holding every key, with no shard id). distAt is when the strategy is
	// read again while messages flow, distOut that a read is out (its
	// answer comes on distCh).
	auto    bool
	distAt  time.Time
	distOut bool
	distCh  chan distAnswer
	spare   []*kpl.Builder
	// reuse says that the client copies a record's data before PutRecords
	// returns and keeps none of it (the SDK's *kinesis.Client: its
	// serializer writes the request body before it sends), so that an
	// aggregate's buffer can take the next one once the call is done; bufs
	// are those buffers, of capacity cfg.MaxBytes. Another client (a test
	// double that records what it was sent, say) may keep the data: its
	// aggregates are never reused.
	reuse   bool
	bufs    [][]byte
	spareIn []*entry        // reused buffer for draining incoming
	sealing [][]byte        // reused: the aggregates dispatch seals
	keys    []string        // reused: a pass's keys (hashKeys)
	hashes  []shard.HashKey // reused: their hash keys
	// json encodes the messages of lone Publish calls (see encode).
	json jsonSlab
	// Reused buffers of dispatch and send.
	sending     []*aggUnit
	sendRecs    []unorderedRecord
	sendEntries []*entry
}

// aggShard is one open shard of the map and what is queued for it.
type aggShard struct {
	id       string
	rng      shard.HashRange
	hashKey  string               // the shard's starting hash key: every aggregate's ExplicitHashKey
	sealed   []*aggUnit           // ready to go, in order
	open     *aggUnit             // the unit filling, or nil
	openedAt time.Time            // when open got its first message (for the linger)
	inFlight int                  // units of this shard in flight
	keys     map[uint64]aggKeyRef // keys with a message in an unresolved unit, by lineKey
	waiting  int                  // messages in the keys' lines
	// fill is how many messages the shard's last aggregate sent held: the
	// next one's item list starts at that capacity, rather than growing
	// to it one doubling (and allocation) at a time.
	fill int
	// backAt and backN: when the shard's last unit came back, and how many
	// messages it held (see refilling).
	backAt time.Time
	backN  int
}

// aggKeyRef is a key with messages in an unresolved unit of its shard.
//
// The lines are kept by lineKey, 64 bits of the key's MD5, which is
// cheaper to look up than the key (a third less CPU than the whole hash
// key: the map's 64-bit fast path): partition keys whose lineKeys are
// equal share a line, which only orders them as one key (a key of
// another shard is in another shard's map).
type aggKeyRef struct {
	unit *aggUnit
	idx  int       // the key's entry in the key table of unit.b, while unit is open
	line *[]*entry // the hash key's later messages, in order; nil: none
}

// waiting returns the messages in ref's line.
func (ref aggKeyRef) waiting() []*entry {
	if ref.line == nil {
		return nil
	}
	return *ref.line
}

// aggUnit is one record to put: an aggregate of messages, or one message
// sent plain.
type aggUnit struct {
	sh      *aggShard
	items   []*entry
	dropped []*entry     // abandoned before it was sent: their keys are released with it
	b       *kpl.Builder // nil for a plain unit, and once encoded
	plain   bool
	sent    bool
	rec     unorderedRecord // the record to put, between claim and send
	sentAt  time.Time       // when it was handed to the batcher
	buf     []byte          // the encoded aggregate, from claim until its call is done
	// landed is set when the unit was stored on a shard other than the
	// one it was sent to, or on that shard but too long after the map was
	// confirmed (the stream may have been created again, the shard id
	// reused with another range): the next listing decides whether that
	// shard holds all its keys (the unit stands) or it is sent again.
	landed *Receipt
}

type aggResult struct {
	u   *aggUnit
	r   Receipt
	err error
}

func newAggregator(bt *batcher, client kinesisapi.API, stream string, cfg Aggregation, log *slog.Logger) *aggregator {
	ctx, cancel := context.WithCancel(context.Background())
	a := &aggregator{
		bt: bt, client: client, stream: stream, cfg: cfg, log: log,
		ctx: ctx, cancel: cancel, trust: aggMapTrust,
		wake:    make(chan struct{}, 1),
		results: make(chan aggResult, 16),
		distCh:  make(chan distAnswer, 1),
		done:    make(chan struct{}),
	}
	_, a.reuse = client.(*kinesis.Client)
	go a.run()
	return a
}

// submit queues one message; its key must be valid and its data within
// the stream's record size with the key (conn.submit checks both). One
// over MaxBytes goes plain.
//
// run computes the key's MD5, with those of the other messages of its
// pass, side by side (shard.HashKeysOf): for a batch's messages too, where
// one at a time on the batch's goroutine cost about four times as much.
func (a *aggregator) submit(ctx context.Context, key string, data []byte, w *batchWait) (*entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, a.bt.errorf(ErrPublish, fmt.Errorf("not sent: %w", err))
	}
	e := a.bt.entries.get()
	e.ctx, e.key, e.data, e.ordered, e.wait = ctx, key, data, true, w
	if err := a.queue1(e); err != nil {
		return nil, err
	}
	return e, nil
}

// submitValue queues one message of a lone Publish not yet encoded
// (rec.encode): run encodes it (see encode). Its key must be valid.
func (a *aggregator) submitValue(ctx context.Context, rec Outgoing) (*entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, a.bt.errorf(ErrPublish, fmt.Errorf("not sent: %w", err))
	}
	e := a.bt.entries.get()
	e.ctx, e.key, e.ordered = ctx, rec.PartitionKey, true
	e.val, e.headers, e.encode = rec.value, rec.Headers, true
	if err := a.queue1(e); err != nil {
		return nil, err
	}
	return e, nil
}

// queue1 puts e in line for run, or recycles it when the aggregator is
// closing.
func (a *aggregator) queue1(e *entry) error {
	e.state.Store(entryQueued)
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		e.recycle()
		return a.bt.errorf(ErrNotConnected, nil)
	}
	a.incoming = append(a.incoming, e)
	signal := len(a.incoming) == 1
	a.mu.Unlock()
	if signal {
		a.poke()
	}
	return nil
}

func (a *aggregator) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// close stops accepting messages; run fails the queued ones with
// ErrNotConnected and returns once the aggregates in flight have returned
// (the batcher, closed after it, fails those not yet sent).
func (a *aggregator) close() {
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	a.cancel()
	a.poke()
}

// wait waits for run to return, or for ctx to end.
func (a *aggregator) wait(ctx context.Context) {
	select {
	case <-a.done:
	case <-ctx.Done():
	}
}

func (a *aggregator) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a.mu.Lock()
		if n := len(a.incoming); n > 0 && n < aggGather && !a.closing {
			// A few messages, most likely from the first of many callers
			// that the last results woke: let the others that are ready
			// to run submit theirs first, so that one pass routes them
			// all (a pass per message or two costs more than the routing).
			a.mu.Unlock()
			goruntime.Gosched()
			a.mu.Lock()
		}
		in := a.incoming
		a.incoming = a.spareIn[:0]
		closing := a.closing
		a.mu.Unlock()
		from := len(a.unrouted)
		for _, e := range in {
			if e.encode && !a.encode(e) {
				continue
			}
			a.unrouted = append(a.unrouted, e)
		}
		a.hashKeys(a.unrouted[from:])
		clear(in)
		a.spareIn = in[:0]
		if closing {
			a.failQueued(a.bt.errorf(ErrNotConnected, nil))
			if a.inFlight == 0 {
				return
			}
		} else {
			now := time.Now()
			if a.shards != nil && !a.stale && !now.Before(a.listAt) &&
				(len(a.pending) > 0 || a.idle(now) && (len(a.unrouted) > 0 || a.queued() > 0)) {
				// Idle long enough for the stream to have been deleted and
				// created again, its shard ids reused with other ranges
				// (an aggregate routed by the old map could land on a
				// shard of the expected id that does not hold its keys,
				// and nothing in the answer would say so), or aggregates
				// answered that late: list first.
				a.verify(now)
			}
			if (a.shards == nil || a.stale) && a.inFlight == 0 && (len(a.unrouted)+a.queued() > 0 || len(a.pending) > 0) && !now.Before(a.listAt) {
				a.relist(now)
			}
			if a.shards != nil && !a.stale && !a.idle(now) {
				a.routeAll(now)
				a.dispatch(now)
			}
			if a.shards != nil && !a.distOut && !now.Before(a.distAt) && a.busy() {
				// Only while messages flow: an idle publisher costs no
				// calls (DescribeStreamSummary has a small account-wide
				// rate), and reads it at once when they come again.
				a.distOut = true
				go func() { a.distCh <- a.describe() }()
			}
		}
		var timerC <-chan time.Time
		if at, ok := a.nextWake(); ok && !closing {
			timer.Reset(time.Until(at))
			timerC = timer.C
		}
		select {
		case <-a.wake:
		case d := <-a.distCh:
			a.distOut = false
			a.distAt = time.Now().Add(aggDistributionEvery)
			if d.ok && d.auto != a.auto {
				a.log.Warn("kinesis aggregating publisher: the stream's record distribution strategy changed; routing again", "stream", a.stream, "auto", d.auto)
				a.stale = true // the next listing re-routes what is queued
			}
		case r := <-a.results:
			a.settle(r, time.Now())
			// Take every other result that is in too before dispatching,
			// so that what they release fills the same units.
			for more := true; more; {
				select {
				case r := <-a.results:
					a.settle(r, time.Now())
				default:
					more = false
				}
			}
		case <-timerC:
		}
	}
}

// hashKeys computes the hash keys of a pass's messages, side by side.
func (a *aggregator) hashKeys(es []*entry) {
	keys := a.keys[:0]
	for _, e := range es {
		keys = append(keys, e.key)
	}
	a.hashes = slices.Grow(a.hashes[:0], len(keys))[:len(keys)]
	shard.HashKeysOf(a.hashes, keys)
	for i, e := range es {
		e.hk = a.hashes[i]
	}
	clear(keys)
	a.keys = keys[:0]
}

// queued counts the messages in shard queues and keys' lines.
func (a *aggregator) queued() int {
	n := 0
	for _, sh := range a.shards {
		for _, u := range sh.sealed {
			n += len(u.items)
		}
		if sh.open != nil {
			n += len(sh.open.items)
		}
		n += sh.waiting
	}
	return n
}

// relist lists the shards again and puts every queued message back in
// line for routing, each key's in its order, ahead of the messages that
// arrived since (they are younger). Nothing is in flight, so nothing sent
// can overtake what is re-routed. A listing that fails is tried again
// after a backoff; a stream that does not exist, or a listing the service
// refuses for good (access denied, say), fails every queued message.
func (a *aggregator) relist(now time.Time) {
	if l, open, ok := a.list(now); ok {
		a.remap(now, l, open)
	}
}

// idle says whether the stream was last known to be the one the map was
// listed from too long ago to route by the map (see aggMapTrust).
func (a *aggregator) idle(now time.Time) bool { return now.Sub(a.confirmedAt) >= a.trust }

// verify lists the shards while the map is not known to be stale: the
// publisher was idle, or aggregates were answered too late to be trusted
// (pending). A listing started after their answers that shows the map
// unchanged says they are stored where their keys are read, and confirms
// the map for the next aggregates; a changed map is taken as after a
// reshard (relist), its pending aggregates settled by where they landed.
func (a *aggregator) verify(now time.Time) {
	l, open, ok := a.list(now)
	if !ok {
		return
	}
	if !sameShards(a.shards, open) {
		// Not the map the aggregates in flight were routed by: confirms
		// nothing about them, so confirmedAt stays until remap.
		a.log.Info("kinesis aggregating publisher: the shard map changed while idle (stream created again?)", "stream", a.stream, "shards", len(open))
		if a.inFlight == 0 {
			a.remap(now, l, open)
		} else {
			a.stale = true // remapped once what is in flight has returned
		}
		return
	}
	a.confirmedAt = now // the stream was the map's at some time after now
	for _, u := range a.pending {
		if !a.auto && !a.holdsAll(l, u.landed.ShardID, u.items) {
			// Not on a shard of the map: settled by the next listing
			// (relist), which sends it again.
			u.sh.sealed = slices.Insert(u.sh.sealed, 0, u)
			a.stale = true
			continue
		}
		r := *u.landed
		a.release(u, now)
		a.stored(u, r)
	}
	clear(a.pending)
	a.pending = a.pending[:0]
}

// list lists the shards, the open ones sorted by range start. A listing
// that fails is tried again after a backoff; a stream that does not
// exist, or a listing the service refuses for good (access denied, say),
// fails every queued message.
func (a *aggregator) list(now time.Time) (*shard.Lineage, []*aggShard, bool) {
	ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	l, err := shard.List(ctx, a.client, a.stream)
	cancel()
	var open []*aggShard
	if err == nil {
		for _, id := range l.IDs() {
			if info, _ := l.Shard(id); !info.Closed && info.StartingHashKey != "" {
				open = append(open, &aggShard{id: id, rng: info.Range, hashKey: info.StartingHashKey})
			}
		}
		if len(open) == 0 {
			err = errors.New("ListShards found no open shard")
		}
	}
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			a.failQueued(a.bt.errorf(ErrStream, fmt.Errorf("ListShards: %w", err)))
			a.listFail = 0
			if a.shards != nil {
				a.stale = true // the next messages list again
			}
			return nil, nil, false
		}
		if kind, retry := classifyCallError(err); !retry && !a.landedWaiting() {
			// Refused for good (an identity that may put records but not
			// list shards, a stream name the service rejects): retried, the
			// messages would wait out their contexts (with none, for ever)
			// while the refusal showed in warnings only. They fail as a
			// refused PutRecords would; the next ones list again. (An
			// aggregate stored on another shard, which only a listing can
			// settle, is not failed: its messages may be read.)
			a.failQueued(a.bt.errorf(kind, fmt.Errorf("ListShards: %w", err)))
			a.listFail = 0
			return nil, nil, false
		}
		a.listFail++
		backoff := min(50*time.Millisecond<<min(a.listFail-1, 10), 5*time.Second)
		a.listAt = now.Add(backoff)
		a.log.Warn("kinesis aggregating publisher: listing shards failed; retrying", "stream", a.stream, "attempt", a.listFail, "err", err)
		return nil, nil, false
	}
	a.listFail, a.listAt = 0, time.Time{}
	if d := a.describe(); d.ok {
		a.auto = d.auto
	}
	a.distAt = now.Add(aggDistributionEvery)
	if a.auto {
		// The service picks the shard: one bin for every key.
		open = []*aggShard{{rng: shard.HashRange{End: shard.HashKey{Hi: math.MaxUint64, Lo: math.MaxUint64}}}}
	}
	sort.Slice(open, func(i, j int) bool { return open[i].rng.Start.Less(open[j].rng.Start) })
	return l, open, true
}

// remap takes the shard map of listing l (open, sorted) and puts every
// queued message back in line for routing, each key's in its order, ahead
// of the messages that arrived since (they are younger); nothing is in
// flight. An aggregate stored on a shard that holds all its keys stands;
// any other goes again.
func (a *aggregator) remap(now time.Time, l *shard.Lineage, open []*aggShard) {
	a.confirmedAt = now // the stream was the listed one at some time after now
	// A key is in at most one unit: its unit's messages, then its line.
	var back []*entry
	for _, u := range a.pending {
		if a.auto || a.holdsAll(l, u.landed.ShardID, u.items) {
			a.stored(u, *u.landed)
			continue
		}
		back = append(back, u.items...)
	}
	clear(a.pending)
	a.pending = a.pending[:0]
	for _, sh := range a.shards {
		units := sh.sealed
		if sh.open != nil {
			units = append(units, sh.open)
		}
		for _, u := range units {
			if u.landed != nil && (a.auto || a.holdsAll(l, u.landed.ShardID, u.items)) {
				// Stored on a shard that every key of it maps to, or on
				// any shard of a stream now AUTO (whose readers filter
				// nothing): it stands. Sent again, it would be read twice.
				a.stored(u, *u.landed)
				continue
			}
			// A reader may drop an aggregate holding a key of another
			// shard whole, or skip just that key's sub-records: all of
			// it goes again, to its keys' shards.
			back = append(back, u.items...)
		}
	}
	for _, sh := range a.shards {
		// By key, not in the map's order, so that a seeded simulation
		// repeats the order: only the keys with a line cost the sort.
		var lines []uint64
		for k, ref := range sh.keys {
			if ref.line != nil {
				lines = append(lines, k)
			}
		}
		slices.Sort(lines)
		for _, k := range lines {
			back = append(back, sh.keys[k].waiting()...)
		}
	}
	a.unrouted = append(back, a.unrouted...)
	if a.shards != nil {
		level := slog.LevelInfo
		if sameShards(a.shards, open) {
			level = slog.LevelDebug // the check of an idle publisher's map, most likely
		}
		a.log.Log(a.ctx, level, "kinesis aggregating publisher: shard map listed again", "stream", a.stream, "shards", len(open))
	}
	a.shards, a.stale = open, false
}

// sameShards says whether two shard maps have the same shards, by id and
// range.
func sameShards(x, y []*aggShard) bool {
	return slices.EqualFunc(x, y, func(a, b *aggShard) bool { return a.id == b.id && a.rng == b.rng })
}

// landedWaiting says whether an aggregate stored on a shard other than
// the one it was sent to, or answered too late, waits for a listing to
// say whether it stands.
func (a *aggregator) landedWaiting() bool {
	if len(a.pending) > 0 {
		return true
	}
	for _, sh := range a.shards {
		for _, u := range sh.sealed {
			if u.landed != nil {
				return true
			}
		}
	}
	return false
}

// builder returns an empty builder, reusing one whose aggregate was
// encoded: its key table and record list keep their capacity.
func (a *aggregator) builder() *kpl.Builder {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	return &kpl.Builder{}
}

// takeBuf returns an empty buffer for an aggregate of size bytes: a
// reused one when the client allows it and the aggregate is large.
func (a *aggregator) takeBuf(size int) []byte {
	if !a.reuse || size < a.cfg.MaxBytes/4 {
		return make([]byte, 0, size)
	}
	if n := len(a.bufs); n > 0 {
		b := a.bufs[n-1]
		a.bufs[n-1] = nil
		a.bufs = a.bufs[:n-1]
		return b
	}
	return make([]byte, 0, a.cfg.MaxBytes)
}

// aggSpareBufs and aggSpareBytes bound the aggregate buffers kept for
// reuse: 8 of the default size, fewer of a larger one (one at least).
const (
	aggSpareBufs  = 8
	aggSpareBytes = 1 << 20
)

// putBuf takes back the buffer of unit u, whose call is done (the client
// holds none of its data).
func (a *aggregator) putBuf(u *aggUnit) {
	b := u.buf
	u.buf = nil
	keep := min(aggSpareBufs, max(1, aggSpareBytes/a.cfg.MaxBytes))
	if a.reuse && cap(b) == a.cfg.MaxBytes && len(a.bufs) < keep {
		a.bufs = append(a.bufs, b[:0])
	}
}

// holdsAll reports whether the hash-key range of shard id (in l) holds the
// key of every message of items.
func (a *aggregator) holdsAll(l *shard.Lineage, id string, items []*entry) bool {
	info, ok := l.Shard(id)
	if !ok || info.StartingHashKey == "" {
		return false
	}
	for _, e := range items {
		if !info.Range.Contains(e.hk) {
			return false
		}
	}
	return true
}

// shardFor returns the open shard whose range holds k, or nil.
func (a *aggregator) shardFor(k shard.HashKey) *aggShard {
	i := sort.Search(len(a.shards), func(i int) bool { return k.Less(a.shards[i].rng.Start) })
	if i == 0 {
		return nil
	}
	if sh := a.shards[i-1]; sh.rng.Contains(k) {
		return sh
	}
	return nil
}

// routeAll routes the unrouted messages, in order.
func (a *aggregator) routeAll(now time.Time) {
	for i, e := range a.unrouted {
		a.unrouted[i] = nil
		if e.state.Load() == entryAbandoned {
			continue
		}
		if sh := a.shardFor(e.hk); sh != nil {
			a.route(sh, e, false, now)
		} else {
			// No open shard holds the key (a map caught mid-reshard): send
			// it plain, which the service routes itself. It is queued on
			// the shard of the lowest range so that it is still sent once.
			a.route(a.shards[0], e, true, now)
		}
	}
	a.unrouted = a.unrouted[:0]
}

// route puts a message of shard sh in the shard's open unit (opening one,
// and sealing the full one, as needed), or in a plain unit of its own when
// it cannot share a record; or, when its key is in a unit that takes no
// more of it, at the end of its key's line.
func (a *aggregator) route(sh *aggShard, e *entry, plain bool, now time.Time) {
	if !plain {
		plain = kpl.Overhead+kpl.RecordOverhead(len(e.key), len(e.data))+len(e.data)+len(e.key) > a.cfg.MaxBytes
	}
	ref, busy := sh.keys[lineKey(e.hk)]
	if busy && (plain || ref.unit != sh.open || ref.line != nil) {
		a.queue(sh, e, ref)
		return
	}
	if plain {
		u := &aggUnit{sh: sh, items: []*entry{e}, plain: true}
		sh.sealed = append(sh.sealed, u) // units share no key: it may go ahead of the open one
		a.track(sh, e, u, 0)
		return
	}
	u := sh.open
	if u != nil {
		// The unit's key table holds the key when the key is busy in it
		// (ref.unit is the open unit, see above), as entry ref.idx.
		limit := a.cfg.MaxBytes - len(u.items[0].key)
		added := false
		if busy && u.b.KeyAt(ref.idx) == e.key {
			added = u.b.AddAtWithin(ref.idx, e.data, limit)
		} else {
			var idx int
			if idx, added = u.b.AddNewWithin(e.key, e.data, limit); added && !busy {
				a.track(sh, e, u, idx)
			}
		}
		if added {
			u.items = append(u.items, e)
			return
		}
		// Full: sealed, and a new unit opened.
		sh.sealed = append(sh.sealed, u)
		sh.open = nil
		if busy { // its key is in the unit just sealed: it waits for it
			a.queue(sh, e, ref)
			return
		}
	}
	// A key busy in a unit is busy in the open one (see above), so this
	// key is in none.
	u = &aggUnit{sh: sh, b: a.builder(), items: make([]*entry, 0, max(sh.fill, 1))}
	sh.open, sh.openedAt = u, now
	idx, _ := u.b.AddNewWithin(e.key, e.data, math.MaxInt) // it fits: it is not plain
	u.items = append(u.items, e)
	a.track(sh, e, u, idx)
}

// lineKey is the key of hk's line in its shard's map (aggShard.keys).
func lineKey(hk shard.HashKey) uint64 { return hk.Lo }

// track records that e's key has a message in unit u of sh, as entry idx
// of the unit's key table.
func (a *aggregator) track(sh *aggShard, e *entry, u *aggUnit, idx int) {
	if sh.keys == nil {
		sh.keys = make(map[uint64]aggKeyRef)
	}
	sh.keys[lineKey(e.hk)] = aggKeyRef{unit: u, idx: idx}
}

// queue puts e at the end of its hash key's line (ref is the key's entry).
func (a *aggregator) queue(sh *aggShard, e *entry, ref aggKeyRef) {
	if ref.line == nil {
		ref.line = new([]*entry)
		sh.keys[lineKey(e.hk)] = ref
	}
	*ref.line = append(*ref.line, e)
	sh.waiting++
}

// release lets the keys of a unit go, before its messages are resolved (a
// resolved entry may be recycled): each key's line, if any, is routed
// again, in order, into the shard's open unit.
func (a *aggregator) release(u *aggUnit, now time.Time) {
	sh := u.sh
	for _, list := range [2][]*entry{u.items, u.dropped} {
		for _, e := range list {
			k := lineKey(e.hk)
			ref, ok := sh.keys[k]
			if !ok || ref.unit != u {
				continue // released already (a key twice in the unit)
			}
			delete(sh.keys, k)
			line := ref.waiting()
			sh.waiting -= len(line)
			for _, w := range line {
				if w.state.Load() == entryAbandoned {
					continue
				}
				// A key outside the shard's range (queued here by routeAll
				// from a map caught mid-reshard) goes plain again.
				a.route(sh, w, u.plain && !sh.rng.Contains(w.hk), now)
			}
		}
	}
}

// encode encodes the message of a lone Publish (submitValue) in JSON and
// reports whether it is to be routed: not when its caller has abandoned
// it, nor when it cannot be encoded (its caller gets the error that
// encoding on its own goroutine would have given, or the panic), nor when
// it is over the 1 MiB record size (its caller checks the stream's size,
// which may take a call, and submits it encoded: see publisher.sendLarge).
//
// Encoded here, in one pass over many callers' messages, a message's JSON
// costs less CPU than on its caller's goroutine, one of thousands whose
// cache is cold by the time it runs (BENCHMARKS.md, 'Aggregated
// publishing'); and the messages share slabs (slabWriter) rather than
// each allocating its own. Only the default codec runs here: another may
// do I/O (a schema registry, say), which would hold back every caller's
// messages. The caller waits for the result, so the message is stable
// until then; one whose ctx ends while its message is read here waits for
// that (entryEncoding), so it is never read after Publish has returned.
func (a *aggregator) encode(e *entry) bool {
	if !e.state.CompareAndSwap(entryQueued, entryEncoding) {
		return false // abandoned: its caller is gone
	}
	v, h := e.val, e.headers
	e.val, e.headers, e.encode = nil, nil, false
	payload, err := a.marshal(v)
	if err != nil {
		if p, ok := err.(*codecPanic); ok {
			a.resolve(e, Receipt{}, p)
		} else {
			a.resolve(e, Receipt{}, &Error{Kind: ErrPublish, Op: "encode", Stream: a.stream, Err: err})
		}
		return false
	}
	data := encodeRecord(h, payload)
	if len(data)+len(e.key) > MaxRecordSize {
		a.resolve(e, Receipt{}, &encodedLarge{key: e.key, headers: h, payload: payload})
		return false
	}
	e.data = data
	e.state.Store(entryQueued)
	return true
}

// marshal is json.Marshal(v), into the aggregator's slab; a panic (of a
// type's MarshalJSON) is returned as a *codecPanic, for the caller to
// panic with: on the aggregator's goroutine it would end the process.
func (a *aggregator) marshal(v any) (data []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, &codecPanic{p}
		}
	}()
	return a.json.marshal(v)
}

// jsonSlab encodes messages in JSON, each as json.Marshal does, into
// slabs shared with the messages it encodes next (slabWriter): for the
// aggregator's pass over lone Publish calls, and for each batch of
// StartAll, SendAll and PublishAll. Neither allocates for each message.
type jsonSlab struct {
	enc  *json.Encoder
	slab slabWriter
	typ  reflect.Type     // the last message's type
	fast *jsonenc.Encoder // its compiled encoder; nil: encoding/json
}

func (j *jsonSlab) marshal(v any) ([]byte, error) {
	if t := reflect.TypeOf(v); t != j.typ {
		j.typ, j.fast = t, jsonenc.For(t)
	}
	if j.fast != nil {
		if out, ok := j.slab.appendJSON(j.fast, v); ok {
			return out, nil
		}
	}
	if j.enc == nil {
		j.enc = json.NewEncoder(&j.slab)
	}
	if err := j.enc.Encode(v); err != nil {
		return nil, err
	}
	out := j.slab.last
	j.slab.last = nil
	return out[:len(out)-1], nil // what json.Marshal returns: without Encode's newline
}

// slabWriter takes each JSON message the aggregator encodes into a slab
// shared with the next ones, so that a message costs no allocation of its
// own: a slab lives as long as any of its messages.
type slabWriter struct {
	slab []byte // the slab being filled
	last []byte // what the last Write wrote
}

// Slabs of slabBytes take messages of up to slabMax bytes; a larger one
// has a slice of its own.
const (
	slabBytes = 16 << 10
	slabMax   = 2 << 10
)

func (w *slabWriter) Write(p []byte) (int, error) {
	if len(p) > slabMax {
		w.last = append([]byte(nil), p...)
		return len(p), nil
	}
	if cap(w.slab)-len(w.slab) < len(p) {
		w.slab = make([]byte, 0, slabBytes)
	}
	n := len(w.slab)
	w.slab = append(w.slab, p...)
	w.last = w.slab[n:len(w.slab):len(w.slab)] // capped: an append to it copies
	return len(p), nil
}

// appendJSON writes v's JSON with e at the end of the slab: a message
// that outgrew the room left (at least slabMax) is copied out to a slice
// of its own, as Write does for large ones.
func (w *slabWriter) appendJSON(e *jsonenc.Encoder, v any) ([]byte, bool) {
	if cap(w.slab)-len(w.slab) < slabMax {
		w.slab = make([]byte, 0, slabBytes)
	}
	n := len(w.slab)
	out, ok := e.Append(w.slab, v)
	switch {
	case !ok:
		return nil, false
	case cap(out) != cap(w.slab): // grown into a new array
		return append([]byte(nil), out[n:]...), true
	}
	w.slab = out
	return out[n:len(out):len(out)], true
}

// codecPanic is a panic of a lone Publish's encoding on the aggregator's
// goroutine, which its caller panics with (as it would have had it
// encoded the message itself).
type codecPanic struct{ value any }

func (*codecPanic) Error() string { return "the encoding of a message panicked" }

// encodedLarge is the result of a lone Publish's message whose record is
// over MaxRecordSize: encode hands it back to its caller, which checks it
// against the stream's own size and submits it encoded.
type encodedLarge struct {
	key     string
	headers Headers
	payload []byte
}

func (*encodedLarge) Error() string { return "a record over 1 MiB, handed back to its caller" }

// aggGather is the number of messages below which run, woken, first lets
// the other goroutines that are ready to run go (see run).
const aggGather = 64

// aggInFlightPerShard bounds the units of one shard in flight at once.
const aggInFlightPerShard = 4

// aggOpenWait is the default of Aggregation.InFlightWait: how long a
// shard's open unit waits for the units in flight before it goes anyway (a
// slot being free), so that a unit retried with backoff, or a slow call,
// does not hold the other keys' messages for long.
const aggOpenWait = 100 * time.Millisecond

// openDue says whether shard sh's open unit goes now: when nothing of the
// shard is in flight and it has lingered, or when it has waited
// InFlightWait (or lingered, if longer) for the units in flight.
func (a *aggregator) openDue(sh *aggShard, now time.Time) bool {
	age := now.Sub(sh.openedAt)
	if sh.inFlight == 0 {
		return age >= a.cfg.Linger && !a.refilling(sh, now)
	}
	return sh.inFlight < aggInFlightPerShard && age >= max(a.cfg.Linger, a.cfg.InFlightWait)
}

// refilling says whether shard sh's open unit, with nothing of the shard
// in flight, waits for the callers its last unit's answer just woke: for
// up to aggRefill after that answer, while it holds fewer messages than
// that unit did. Sent at once, it would carry only the messages that
// came while that unit was out, and each caller it woke would come back
// to the next unit: Publish from 2,048 goroutines, a closed loop, went
// in PutRecords calls of 2.5–3 aggregates on kinesalite (196 calls per
// 100k messages; 150 with this wait), and each call costs the client and
// the service their HTTP work (BENCHMARKS.md, 'Aggregated publishing'). A caller that publishes alone waits no longer: its unit's
// answer woke one caller, and its next message is that one.
func (a *aggregator) refilling(sh *aggShard, now time.Time) bool {
	return now.Sub(sh.backAt) < aggRefill && len(sh.open.items) < sh.backN
}

// aggRefill bounds refilling: short beside a PutRecords round trip.
const aggRefill = 2 * time.Millisecond

// dispatch sends each shard's sealed units, in order, while the shard has
// a free slot; then its open unit, when nothing of its shard is in flight
// and its first message has lingered (so that it fills while others are
// in flight). Units share no key, so none waits for another.
func (a *aggregator) dispatch(now time.Time) {
	units := a.sending[:0]
	for _, sh := range a.shards {
		for sh.inFlight < aggInFlightPerShard && len(sh.sealed) > 0 {
			u := sh.sealed[0]
			sh.sealed[0] = nil
			sh.sealed = sh.sealed[1:]
			if a.claim(u, now) {
				units = append(units, u)
			}
		}
		if len(sh.sealed) == 0 {
			sh.sealed = nil // drop the shifted array
		}
		if u := sh.open; u != nil && a.openDue(sh, now) {
			sh.open = nil
			if a.claim(u, now) {
				units = append(units, u)
			}
		}
	}
	a.seal(units)
	a.send(units, now)
	clear(units)
	a.sending = units[:0]
}

// seal writes the MD5 trailers of the claimed units' aggregates, side by
// side (kpl.Seal).
func (a *aggregator) seal(units []*aggUnit) {
	sealing := a.sealing[:0]
	for _, u := range units {
		if !u.plain {
			sealing = append(sealing, u.buf)
		}
	}
	kpl.Seal(sealing)
	clear(sealing)
	a.sealing = sealing[:0]
}

// claim claims the unit's messages (dropping those abandoned while queued
// or whose ctx has ended), encodes it and counts it in flight; it reports
// whether anything of it is left to send (seal then writes its aggregate's
// MD5, and send hands it to the batcher).
func (a *aggregator) claim(u *aggUnit, now time.Time) bool {
	head := u.items[0].key // the key route bounded the aggregate with
	live := u.items[:0]
	for _, e := range u.items {
		if e.state.Load() == entryInFlight || !e.withdraw() && e.state.CompareAndSwap(entryQueued, entryInFlight) {
			live = append(live, e)
		} else {
			u.dropped = append(u.dropped, e)
		}
	}
	clear(u.items[len(live):])
	u.items = live
	if len(u.items) == 0 {
		if u.b != nil {
			u.b.Reset()
			a.spare = append(a.spare, u.b)
			u.b = nil
		}
		a.release(u, now)
		return false
	}
	if u.plain {
		u.rec = unorderedRecord{key: u.items[0].key, data: u.items[0].data}
	} else {
		u.sh.fill = len(u.items)
		if len(u.dropped) > 0 {
			u.b.Reset()
			for _, e := range u.items {
				u.b.Add(e.key, e.data)
			}
		}
		// The record's own key is its first message's, as the KPL does,
		// even when that message was dropped: MaxBytes was counted with
		// it, and the next message's key may be longer. The
		// ExplicitHashKey puts the record on the shard.
		u.buf = u.b.AppendUnsealed(a.takeBuf(u.b.Size())) // dispatch seals it
		u.rec = unorderedRecord{key: head, hashKey: u.sh.hashKey, data: u.buf}
		u.b.Reset()
		a.spare = append(a.spare, u.b)
		u.b = nil
	}
	u.sent = true
	u.sentAt = now
	u.sh.inFlight++
	a.inFlight++
	return true
}

// send hands the claimed units of one pass to the batcher together, so
// that they share a PutRecords call (fewer calls: less CPU per message for
// the client and the service alike), and waits for each one's result in a
// goroutine of its own. The aggregator orders a shard's units itself (no
// key in two units in flight), so the records need no ordering of the
// batcher's.
func (a *aggregator) send(units []*aggUnit, now time.Time) {
	if len(units) == 0 {
		return
	}
	recs := a.sendRecs[:0]
	for _, u := range units {
		recs = append(recs, u.rec)
		u.rec = unorderedRecord{}
	}
	entries, err := a.bt.submitMany(recs, a.sendEntries[:0])
	clear(recs)
	a.sendRecs = recs[:0]
	if err != nil {
		for _, u := range units {
			a.back(u)
			a.release(u, now)
			a.resolveAll(u.items, Receipt{}, err)
		}
		return
	}
	for i, u := range units {
		ae := entries[i]
		go func() {
			<-ae.done
			r, err := ae.result()
			a.results <- aggResult{u: u, r: r, err: err}
		}()
	}
	clear(entries)
	a.sendEntries = entries[:0]
}

// back counts unit u out of flight: its call is done or was never made,
// so its buffer may be reused.
func (a *aggregator) back(u *aggUnit) {
	u.sent = false
	a.putBuf(u)
	u.sh.inFlight--
	a.inFlight--
}

// settle hands a returned unit's result to its messages. An aggregate
// that landed on a shard other than the one it was sent to holds messages
// of keys that shard does not cover: it goes back to its shard's queue,
// keys and all, to be sent again (to the right shards) after the listing
// that the stale map calls for.
func (a *aggregator) settle(r aggResult, now time.Time) {
	u := r.u
	a.back(u)
	u.sh.backAt, u.sh.backN = now, len(u.items)
	if r.err != nil {
		if errors.Is(r.err, ErrStream) {
			// The stream is gone: its shard map with it. Should a stream
			// of the same name come back, its shards may bear the old
			// ids with other ranges, so an aggregate would seem to land
			// where it was sent while holding keys of another shard. The
			// next messages wait for a listing (one that finds no stream
			// fails them with ErrStream).
			a.stale = true
		}
		a.release(u, now)
		a.resolveAll(u.items, Receipt{}, r.err)
		return
	}
	// A backend that names no shard (none that we know of) is trusted; on
	// an AUTO stream (u.sh.id "") any shard is where it belongs.
	if r.r.ShardID != u.sh.id && r.r.ShardID != "" && u.sh.id != "" {
		a.stale = true
		// A listing that still shows the old map (a reshard in progress)
		// would send the aggregate to the same closed shard: back off.
		if a.staleRun++; a.staleRun > 1 {
			a.listAt = now.Add(min(50*time.Millisecond<<min(a.staleRun-2, 8), 2*time.Second))
		}
		if !u.plain {
			a.log.Info("kinesis aggregating publisher: an aggregate landed on another shard (resharded?); sending its messages again",
				"stream", a.stream, "shard", u.sh.id, "landed", r.r.ShardID, "messages", len(u.items))
			if a.isClosing() {
				a.release(u, now)
				a.resolveAll(u.items, Receipt{}, landedError(a.bt.errorf(ErrNotConnected, nil), u.sh.id, r.r.ShardID))
				return
			}
			u.landed = &r.r
			u.sh.sealed = slices.Insert(u.sh.sealed, 0, u)
			return
		}
	}
	if !u.plain && now.Sub(a.confirmedAt) >= a.trust {
		// Answered too long after the stream was last known to be the
		// one the map was listed from: it may have been deleted and
		// created again, and the shard of this id may not hold these
		// keys (a reader skips a sub-record whose key is not in its
		// shard's range). A listing started after now says whether it
		// stands (verify). A plain record is routed by the service, by
		// its own key: it is where it belongs.
		if a.isClosing() {
			a.release(u, now)
			a.resolveAll(u.items, Receipt{}, landedError(a.bt.errorf(ErrNotConnected, nil), u.sh.id, r.r.ShardID))
			return
		}
		u.landed = &r.r
		a.pending = append(a.pending, u)
		return
	}
	if now.Sub(a.confirmedAt) < a.trust && u.sentAt.After(a.confirmedAt) {
		a.confirmedAt = u.sentAt // stored in the map's stream, after sentAt
	}
	a.staleRun = 0
	a.release(u, now)
	a.stored(u, r.r)
}

// aggMapTrust is how long after a time the stream was known to be the one
// its shard map was listed from an aggregate's answer is trusted to come
// from that stream (and so to be on a shard holding its keys): deleting a
// stream and creating it again takes the service longer (each step
// passes through a DELETING or CREATING state of seconds), so a put
// processed less than that after the stream was known is in it (or fails
// with ResourceNotFoundException). Publishers that go on sending confirm
// the map with each answer; one idle for longer lists the shards before it
// routes, and an answer that comes later than that waits for a listing.
// A server that deletes and creates a stream again faster than this
// (kinesalite and kinesis-mock without delays) can misplace an
// aggregate sent in that window unnoticed. (A variable for the tests that
// need a map left stale across a slow reshard; an aggregator reads it once.)
var aggMapTrust = time.Second

// stored resolves the messages of a unit stored as r.
func (a *aggregator) stored(u *aggUnit, r Receipt) {
	for i, e := range u.items {
		rec := r
		rec.PartitionKey = e.key
		if !u.plain {
			rec.SubSequence = int64(i)
		}
		a.resolve(e, rec, nil)
	}
}

func (a *aggregator) isClosing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

func (a *aggregator) resolveAll(items []*entry, r Receipt, err error) {
	for _, e := range items {
		a.resolve(e, r, err)
	}
}

// resolve ends a message (result or error), unless its caller abandoned it.
//
// Callers are woken here, on run, a channel send each. Tried side by side
// and not kept (in process, 2,048 callers, 2026-12-06): waking a unit's
// callers from the unit's own goroutine, and encoding a pass's aggregates
// on goroutines of their own; neither lowered the CPU per message, and
// neither's rate moved outside the noise of a shared 2-core machine.
// Encoding the JSON of a pass's lone Publish calls (encode) half on a
// helper goroutine: CPU per message unchanged (medians 2,471 and 2,483
// ns over 6 alternations), rate no higher on a loaded machine. Holding
// a partial PutRecords call in the batcher while 1 or 2 calls are in
// flight (for up to 5 ms, unless throttled), for fewer, fuller calls: in
// process every call starts with none in flight (the aggregator sends a
// shard's open unit once the shard's last one is back), so it never held;
// on kinesalite, held at 1, calls per 100k messages 196 → 156 but client
// CPU per message no lower (Publish/bare 1.45 · 1.33 against 1.33 · 1.26):
// what cut calls and CPU is refilling, in the aggregator. One
// channel per aggregate, closed once, would save only each send's
// channel lock: the runtime still readies each caller one by one, and a
// caller cannot know its aggregate when it starts to wait. Measured apart
// (2,048 goroutines each waiting on its own channel, or all of one pass
// on one channel closed), a wait and its wake cost the same, 570 ns of
// CPU either way.
func (a *aggregator) resolve(e *entry, r Receipt, err error) {
	if e.finish() {
		e.receipt, e.err = r, err
		e.signal()
	}
}

// failQueued fails every message not in flight: unrouted, in a unit not
// sent, or in a key's line. Only the keys of units in flight stay tracked.
func (a *aggregator) failQueued(err error) {
	for _, u := range a.pending {
		a.resolveAll(u.items, Receipt{}, landedError(err, u.sh.id, u.landed.ShardID))
	}
	clear(a.pending)
	a.pending = a.pending[:0]
	for _, e := range a.unrouted {
		a.resolve(e, Receipt{}, err)
	}
	clear(a.unrouted)
	a.unrouted = a.unrouted[:0]
	for _, sh := range a.shards {
		for _, u := range sh.sealed {
			if u.landed != nil {
				a.resolveAll(u.items, Receipt{}, landedError(err, sh.id, u.landed.ShardID))
				continue
			}
			a.resolveAll(u.items, Receipt{}, err)
		}
		if sh.open != nil {
			a.resolveAll(sh.open.items, Receipt{}, err)
		}
		sh.sealed, sh.open = nil, nil
		for k, ref := range sh.keys {
			a.resolveAll(ref.waiting(), Receipt{}, err)
			if ref.unit.sent {
				sh.keys[k] = aggKeyRef{unit: ref.unit}
			} else {
				delete(sh.keys, k)
			}
		}
		sh.waiting = 0
	}
}

// landedError is err, a failure of an aggregate's messages, for an
// aggregate that was stored on a shard other than the one it was sent to
// and is not sent again: its messages are in the stream, where a reader
// may or may not take them (only a listing could tell whether the shard it
// landed on covers their keys), so the error must not read as "not
// stored".
func landedError(err error, sent, landed string) error {
	e, ok := err.(*Error)
	if !ok {
		return err
	}
	cause := fmt.Errorf("the aggregate landed on shard %s, not %s, and is not sent again (its messages are stored there, and are read if that shard covers their keys)", landed, sent)
	if landed == sent {
		cause = fmt.Errorf("the aggregate landed on shard %s long after its shard map was listed (the stream may have been created again since, with other ranges under the same ids), and is not sent again (its messages are stored there, and are read if that shard covers their keys)", landed)
	}
	if e.Err != nil {
		cause = fmt.Errorf("%w: %w", cause, e.Err)
	}
	landedErr := *e
	landedErr.Err = maybeStored{cause}
	return &landedErr
}

// nextWake is when run must look again without any event: a lingering
// unit's deadline, or the next listing attempt.
func (a *aggregator) nextWake() (time.Time, bool) {
	if a.shards == nil || a.stale {
		if a.inFlight == 0 {
			return a.listAt, !a.listAt.IsZero()
		}
		return time.Time{}, false
	}
	var at time.Time
	now := time.Now()
	idle := a.idle(now)
	if len(a.pending) > 0 || idle && (len(a.unrouted) > 0 || a.queued() > 0) {
		// A listing is due (verify): now, or after its backoff.
		at = a.listAt
		if at.Before(now) {
			at = now
		}
	}
	if idle {
		return at, !at.IsZero() // nothing is routed before that listing
	}
	if !a.distOut && a.busy() && (at.IsZero() || a.distAt.Before(at)) {
		at = a.distAt // the strategy is read again (it comes with every listing too)
	}
	for _, sh := range a.shards {
		if sh.open == nil || sh.inFlight >= aggInFlightPerShard {
			continue
		}
		t := sh.openedAt.Add(a.cfg.Linger)
		if sh.inFlight == 0 && a.refilling(sh, now) {
			t = later(t, sh.backAt.Add(aggRefill))
		}
		if sh.inFlight > 0 {
			t = sh.openedAt.Add(max(a.cfg.Linger, a.cfg.InFlightWait))
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at, !at.IsZero()
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

// aggDistributionEvery is how often an aggregating publisher reads its
// stream's record distribution strategy between listings: the default
// shard-sync period of subscribers.
var aggDistributionEvery = 10 * time.Second // a variable for tests

// distAnswer is what a read of the stream's distribution strategy found;
// ok is false when the read failed (the last known strategy stands).
type distAnswer struct{ auto, ok bool }

// busy says whether messages are queued or in flight.
func (a *aggregator) busy() bool {
	return a.inFlight > 0 || len(a.unrouted) > 0 || a.queued() > 0
}

// describe reads whether the stream is AUTO.
func (a *aggregator) describe() distAnswer {
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	in := &kinesis.DescribeStreamSummaryInput{}
	in.StreamName, in.StreamARN = streamRef(a.stream)
	out, err := a.client.DescribeStreamSummary(ctx, in)
	if err != nil || out.StreamDescriptionSummary == nil {
		if err != nil && a.ctx.Err() == nil {
			a.log.Warn("kinesis aggregating publisher: reading the stream's record distribution strategy failed", "stream", a.stream, "err", err)
		}
		return distAnswer{}
	}
	return distAnswer{auto: out.StreamDescriptionSummary.RecordDistributionStrategy == types.RecordDistributionStrategyAuto, ok: true}
}
