package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

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
// keys), so they keep their publish order across aggregates and retries.
// The shard map comes from ListShards and is listed again when an
// aggregate lands on a shard other than the one it was sent to (the stream
// was resharded): unless that shard holds all its keys, the aggregate's
// messages are sent again to their keys' new shards, before any later
// message of those keys. A reader that drops an aggregate holding a key of
// another shard reads each message once; one that skips only those
// sub-records (this runtime's subscribers) may read the others twice (at
// least once). A message too
// large to share a record with another is sent plain, in its place in its
// key's order.
type Aggregation struct {
	// MaxBytes bounds one aggregated record, data plus partition key
	// (default DefaultAggregateBytes; at most MaxRecordSize).
	MaxBytes int
	// Linger is how long the messages of a shard with nothing in flight
	// wait for more before they are sent (default 0: at once). While a
	// shard's aggregate is in flight its next one fills regardless, so
	// aggregates grow with the load without any linger.
	Linger time.Duration
}

func (a Aggregation) withDefaults() Aggregation {
	if a.MaxBytes <= 0 {
		a.MaxBytes = DefaultAggregateBytes
	}
	a.MaxBytes = min(a.MaxBytes, MaxRecordSize)
	if a.Linger < 0 {
		a.Linger = 0
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
	stale    bool      // an aggregate landed on a shard it was not sent to: list again
	staleRun int       // aggregates misplaced since one landed where it was sent
	listFail int       // consecutive failed listings
	listAt   time.Time // when the next listing may run
	spare    []*kpl.Builder
}

// aggShard is one open shard of the map and what is queued for it.
type aggShard struct {
	id       string
	rng      shard.HashRange
	hashKey  string         // the shard's starting hash key: every aggregate's ExplicitHashKey
	queue    []*aggUnit     // sealed, in order; the last may still be open
	inFlight int            // units of this shard in flight
	keys     map[string]int // keys of the messages in flight → how many
	openedAt time.Time      // when the head unit got its first message (for the linger)
}

// aggUnit is one record to put: an aggregate of messages, or one message
// sent plain.
type aggUnit struct {
	sh     *aggShard
	items  []*entry
	b      *kpl.Builder // nil for a plain unit, and once encoded
	plain  bool
	sealed bool
	// landed is set when the unit was stored on a shard other than the
	// one it was sent to: the next listing decides whether that shard
	// holds all its keys (the unit stands) or it is sent again.
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
		ctx: ctx, cancel: cancel,
		wake:    make(chan struct{}, 1),
		results: make(chan aggResult, 16),
		done:    make(chan struct{}),
	}
	go a.run()
	return a
}

// submit queues one message; its key must be valid and its data at most
// MaxRecordSize with the key (conn.submit checks both).
func (a *aggregator) submit(ctx context.Context, key string, data []byte) (*entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, a.bt.errorf(ErrPublish, fmt.Errorf("not sent: %w", err))
	}
	e := entryPool.Get().(*entry)
	e.ctx, e.key, e.data, e.ordered = ctx, key, data, true
	e.state.Store(entryQueued)
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		e.recycle()
		return nil, a.bt.errorf(ErrNotConnected, nil)
	}
	a.incoming = append(a.incoming, e)
	signal := len(a.incoming) == 1
	a.mu.Unlock()
	if signal {
		a.poke()
	}
	return e, nil
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
		in := a.incoming
		a.incoming = nil
		closing := a.closing
		a.mu.Unlock()
		a.unrouted = append(a.unrouted, in...)
		if closing {
			a.failQueued(a.bt.errorf(ErrNotConnected, nil))
			if a.inFlight == 0 {
				return
			}
		} else {
			now := time.Now()
			if (a.shards == nil || a.stale) && a.inFlight == 0 && len(a.unrouted)+a.queued() > 0 && !now.Before(a.listAt) {
				a.relist(now)
			}
			if a.shards != nil && !a.stale {
				a.route(now)
				a.dispatch(now)
			}
		}
		var timerC <-chan time.Time
		if at, ok := a.nextWake(); ok && !closing {
			timer.Reset(time.Until(at))
			timerC = timer.C
		}
		select {
		case <-a.wake:
		case r := <-a.results:
			a.inFlight--
			a.settle(r)
		case <-timerC:
		}
	}
}

// queued counts the messages in shard queues.
func (a *aggregator) queued() int {
	n := 0
	for _, sh := range a.shards {
		for _, u := range sh.queue {
			n += len(u.items)
		}
	}
	return n
}

// relist lists the shards again and puts every queued message back in
// line for routing, each shard's in its order, ahead of the messages that
// arrived since (they are younger). Nothing is in flight, so nothing sent
// can overtake what is re-routed. A listing that fails is tried again
// after a backoff; a stream that does not exist fails every queued message.
func (a *aggregator) relist(now time.Time) {
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
			return
		}
		a.listFail++
		backoff := min(50*time.Millisecond<<min(a.listFail-1, 10), 5*time.Second)
		a.listAt = now.Add(backoff)
		a.log.Warn("kinesis aggregating publisher: listing shards failed; retrying", "stream", a.stream, "attempt", a.listFail, "err", err)
		return
	}
	a.listFail, a.listAt = 0, time.Time{}
	sort.Slice(open, func(i, j int) bool { return open[i].rng.Start.Less(open[j].rng.Start) })
	var back []*entry
	for _, sh := range a.shards {
		for _, u := range sh.queue {
			if u.landed != nil && a.holdsAll(l, u.landed.ShardID, u.items) {
				// Stored on a shard that every key of it maps to: it
				// stands. Sent again, it would be read twice.
				a.stored(u, *u.landed)
				continue
			}
			// A reader may drop an aggregate holding a key of another
			// shard whole, or skip just that key's sub-records: all of
			// it goes again, to its keys' shards.
			back = append(back, u.items...)
		}
	}
	a.unrouted = append(back, a.unrouted...)
	if a.shards != nil {
		a.log.Info("kinesis aggregating publisher: shard map listed again", "stream", a.stream, "shards", len(open))
	}
	a.shards, a.stale = open, false
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

// holdsAll reports whether the hash-key range of shard id (in l) holds the
// key of every message of items.
func (a *aggregator) holdsAll(l *shard.Lineage, id string, items []*entry) bool {
	info, ok := l.Shard(id)
	if !ok || info.StartingHashKey == "" {
		return false
	}
	for _, e := range items {
		if !info.Range.Contains(shard.HashKeyOf(e.key)) {
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

// route puts each unrouted message in its shard's open unit, opening a new
// one when it would not fit; a message that cannot share a record (or whose
// hash no open shard holds) becomes a plain unit of its own.
func (a *aggregator) route(now time.Time) {
	for i, e := range a.unrouted {
		a.unrouted[i] = nil
		if e.state.Load() == entryAbandoned {
			continue
		}
		sh := a.shardFor(shard.HashKeyOf(e.key))
		if sh == nil {
			// No open shard holds the key (a map caught mid-reshard): send
			// it plain, which the service routes itself. It is queued on
			// the shard of the lowest range so that it is still sent once.
			sh = a.shards[0]
			sh.push(&aggUnit{sh: sh, items: []*entry{e}, plain: true, sealed: true}, now)
			continue
		}
		var one kpl.Builder
		if one.SizeWith(e.key, e.data)+len(e.key) > a.cfg.MaxBytes {
			sh.push(&aggUnit{sh: sh, items: []*entry{e}, plain: true, sealed: true}, now)
			continue
		}
		u := sh.last()
		if u == nil || u.sealed || u.b.SizeWith(e.key, e.data)+len(u.items[0].key) > a.cfg.MaxBytes {
			if u != nil {
				u.sealed = true
			}
			u = &aggUnit{sh: sh, b: a.builder()}
			sh.push(u, now)
		}
		u.b.Add(e.key, e.data)
		u.items = append(u.items, e)
	}
	a.unrouted = a.unrouted[:0]
}

func (sh *aggShard) last() *aggUnit {
	if len(sh.queue) == 0 {
		return nil
	}
	return sh.queue[len(sh.queue)-1]
}

func (sh *aggShard) push(u *aggUnit, now time.Time) {
	if last := sh.last(); last != nil {
		last.sealed = true
	} else {
		sh.openedAt = now
	}
	sh.queue = append(sh.queue, u)
}

// aggInFlightPerShard bounds the units of one shard in flight at once.
const aggInFlightPerShard = 4

// dispatch sends the units at the head of each shard's queue, in order,
// while the shard has a free slot and the head holds no key that a unit in
// flight holds too (a key has at most one unit unresolved, which keeps its
// order across retries, as the batcher does for plain records). A sealed
// unit (full, or followed by another) goes at once; the open one only when
// nothing of its shard is in flight and its first message has lingered, so
// that it fills while others are in flight.
func (a *aggregator) dispatch(now time.Time) {
	for _, sh := range a.shards {
		for sh.inFlight < aggInFlightPerShard && len(sh.queue) > 0 {
			u := sh.queue[0]
			if !u.sealed && (sh.inFlight > 0 || now.Sub(sh.openedAt) < a.cfg.Linger) {
				break
			}
			if sh.holdsAny(u.items) {
				break
			}
			sh.queue[0] = nil
			sh.queue = sh.queue[1:]
			if len(sh.queue) > 0 {
				sh.openedAt = now
			}
			a.send(u)
		}
	}
}

// holdsAny reports whether a message of one of items' keys is in flight.
func (sh *aggShard) holdsAny(items []*entry) bool {
	if len(sh.keys) == 0 {
		return false
	}
	for _, e := range items {
		if sh.keys[e.key] > 0 {
			return true
		}
	}
	return false
}

// release marks the messages of a returned unit as no longer in flight;
// called before they are resolved, as a resolved entry may be recycled.
func (sh *aggShard) release(u *aggUnit) {
	sh.inFlight--
	for _, e := range u.items {
		if n := sh.keys[e.key] - 1; n > 0 {
			sh.keys[e.key] = n
		} else {
			delete(sh.keys, e.key)
		}
	}
}

// send claims the unit's messages (dropping those abandoned while queued),
// encodes it and queues it on the batcher.
func (a *aggregator) send(u *aggUnit) {
	live := u.items[:0]
	for _, e := range u.items {
		if e.state.Load() == entryInFlight || e.state.CompareAndSwap(entryQueued, entryInFlight) {
			live = append(live, e)
		}
	}
	clear(u.items[len(live):])
	dropped := len(live) < len(u.items)
	u.items = live
	if len(u.items) == 0 {
		if u.b != nil {
			u.b.Reset()
			a.spare = append(a.spare, u.b)
		}
		return
	}
	var key, hashKey string
	var data []byte
	if u.plain {
		key, data = u.items[0].key, u.items[0].data
	} else {
		if dropped {
			u.b.Reset()
			for _, e := range u.items {
				u.b.Add(e.key, e.data)
			}
		}
		// The record's own key is its first message's, as the KPL does;
		// the ExplicitHashKey puts it on the shard.
		key, hashKey, data = u.items[0].key, u.sh.hashKey, u.b.Bytes()
		u.b.Reset()
		a.spare = append(a.spare, u.b)
		u.b = nil
	}
	// The aggregator orders a shard's units itself (no key in two units
	// in flight), so the record needs no ordering of the batcher's.
	ae, err := a.bt.submit(context.Background(), key, hashKey, data, false)
	if err != nil {
		a.resolveAll(u.items, Receipt{}, err)
		return
	}
	sh := u.sh
	if sh.keys == nil {
		sh.keys = make(map[string]int)
	}
	for _, e := range u.items {
		sh.keys[e.key]++
	}
	sh.inFlight++
	a.inFlight++
	go func() {
		<-ae.done
		r, err := ae.result()
		a.results <- aggResult{u: u, r: r, err: err}
	}()
}

// settle hands a returned unit's result to its messages. An aggregate
// that landed on a shard other than the one it was sent to holds messages
// of keys that shard does not cover: it goes back to the front of its
// shard's queue, to be sent again (to the right shards) after the listing
// that the stale map calls for.
func (a *aggregator) settle(r aggResult) {
	u := r.u
	u.sh.release(u)
	if r.err != nil {
		a.resolveAll(u.items, Receipt{}, r.err)
		return
	}
	// A backend that names no shard (none that we know of) is trusted.
	if r.r.ShardID != u.sh.id && r.r.ShardID != "" {
		a.stale = true
		// A listing that still shows the old map (a reshard in progress)
		// would send the aggregate to the same closed shard: back off.
		if a.staleRun++; a.staleRun > 1 {
			a.listAt = time.Now().Add(min(50*time.Millisecond<<min(a.staleRun-2, 8), 2*time.Second))
		}
		if !u.plain {
			a.log.Info("kinesis aggregating publisher: an aggregate landed on another shard (resharded?); sending its messages again",
				"stream", a.stream, "shard", u.sh.id, "landed", r.r.ShardID, "messages", len(u.items))
			if a.isClosing() {
				err := a.bt.errorf(ErrNotConnected, fmt.Errorf("the aggregate landed on shard %s, not %s, and is not sent again during shutdown", r.r.ShardID, u.sh.id))
				a.resolveAll(u.items, Receipt{}, err)
				return
			}
			u.sealed = true
			u.landed = &r.r
			u.sh.queue = slices.Insert(u.sh.queue, 0, u)
			return
		}
	}
	a.staleRun = 0
	a.stored(u, r.r)
}

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
func (a *aggregator) resolve(e *entry, r Receipt, err error) {
	if e.state.Swap(entryDone) != entryAbandoned {
		e.receipt, e.err = r, err
		e.done <- struct{}{}
	}
}

// failQueued fails every message not in flight.
func (a *aggregator) failQueued(err error) {
	for _, e := range a.unrouted {
		a.resolve(e, Receipt{}, err)
	}
	clear(a.unrouted)
	a.unrouted = a.unrouted[:0]
	for _, sh := range a.shards {
		for _, u := range sh.queue {
			a.resolveAll(u.items, Receipt{}, err)
		}
		sh.queue = nil
	}
}

// nextWake is when run must look again without any event: a lingering
// unit's deadline, or the next listing attempt.
func (a *aggregator) nextWake() (time.Time, bool) {
	var at time.Time
	if (a.shards == nil || a.stale) && !a.listAt.IsZero() && a.inFlight == 0 {
		at = a.listAt
	}
	if a.cfg.Linger > 0 && a.shards != nil && !a.stale {
		for _, sh := range a.shards {
			if sh.inFlight == 0 && len(sh.queue) > 0 && !sh.queue[0].sealed {
				if t := sh.openedAt.Add(a.cfg.Linger); at.IsZero() || t.Before(at) {
					at = t
				}
			}
		}
	}
	return at, !at.IsZero()
}
