package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Service limits of PutRecords.
const (
	maxBatchRecords = 500
	// Data plus partition keys, per request: 10 MiB since large records
	// (MaxRecordSizeInKiB), on a stream known to take them; 5 MiB, the
	// limit before them, on any other, since backends that predate them
	// (kinesalite) refuse a larger request.
	maxBatchBytes = 10 << 20
	oldBatchBytes = 5 << 20
)

// batchConfig tunes a stream's batcher. Zero fields take the defaults.
type batchConfig struct {
	maxRecords  int           // records per PutRecords call (≤ 500)
	maxBytes    int           // bytes per PutRecords call (≤ 10 MiB)
	maxInFlight int           // concurrent PutRecords calls per stream
	linger      time.Duration // how long a partial batch waits while a call is in flight
	retryBase   time.Duration // first backoff of a failed entry
	retryMax    time.Duration // backoff cap
	callTimeout time.Duration // deadline of one PutRecords call

	tel *telemetry // nil: no metrics
}

// DefaultPublishCallTimeout bounds one PutRecords call: an endpoint that
// takes a request and never answers must not hold its records' keys (and
// Shutdown) for ever. A healthy call of 5 MiB takes well under a second.
const DefaultPublishCallTimeout = 10 * time.Second

func (c batchConfig) withDefaults() batchConfig {
	if c.maxRecords <= 0 || c.maxRecords > maxBatchRecords {
		c.maxRecords = maxBatchRecords
	}
	if c.maxBytes <= 0 || c.maxBytes > maxBatchBytes {
		c.maxBytes = maxBatchBytes
	}
	if c.maxInFlight <= 0 {
		c.maxInFlight = 4
	}
	if c.linger <= 0 {
		c.linger = time.Millisecond
	}
	if c.retryBase <= 0 {
		c.retryBase = 50 * time.Millisecond
	}
	if c.retryMax <= 0 {
		c.retryMax = 5 * time.Second
	}
	if c.callTimeout <= 0 {
		c.callTimeout = DefaultPublishCallTimeout
	}
	return c
}

// An entry's state; the caller and the batcher race only on queued→abandoned
// versus queued→inFlight, settled by compare-and-swap.
const (
	entryQueued int32 = iota
	entryInFlight
	entryAbandoned // the caller's ctx ended while the entry was queued or waiting to be resent
	entryDone
	// entryEncoding: the aggregator is encoding the entry's message (val);
	// a caller whose ctx ends waits for it to be done, so that the
	// message is not read after Publish has returned (see
	// aggregator.encode).
	entryEncoding
)

// entry is one caller's record inside the batcher.
type entry struct {
	ctx     context.Context
	key     string
	hashKey string // the ExplicitHashKey, when set (a KPL aggregate's)
	data    []byte
	ordered bool // false for process-unique keys, which need no ordering
	state   atomic.Int32
	// hk is the key's MD5 (an aggregated message's), computed once, by
	// the aggregator as it takes the message in (see aggregator.submit).
	hk shard.HashKey
	// val is an aggregated Publish's message, not yet encoded (data is
	// nil): the aggregator encodes it, in JSON with headers, as it takes
	// the message in (see aggregator.encode).
	val     any
	headers Headers
	encode  bool

	// Owned by the batcher goroutine.
	attempts  int
	notBefore time.Time
	// maxBatch, when positive, is the largest request this entry may go
	// in: a request the service refused whole is split in halves until the
	// entry it refused for is alone (see isolate).
	maxBatch int
	// failed is what the caller reports if it gives up (and the cause a
	// shutdown reports): set by the batcher at each retry, read by the
	// caller at any time.
	failed atomic.Pointer[failure]

	// Written once before the caller is told (signal).
	receipt Receipt
	err     error
	done    chan struct{} // the caller is told here, unless wait is set
	// wait is the batch the entry is one of, whose waiter is told when
	// every entry of it is resolved; resolved says this one is.
	wait     *batchWait
	resolved atomic.Bool
	pool     *entryPool // where recycle returns it
}

// signal tells e's caller that its result is written: on e.done, or, for
// an entry of a batch, by counting the batch down. e may be recycled as
// soon as its caller is told, so nothing of it is read after.
func (e *entry) signal() {
	if w := e.wait; w != nil {
		e.resolved.Store(true)
		w.release()
		return
	}
	e.done <- struct{}{}
}

// told says whether e's caller has been told its result (signal), for a
// caller that stopped waiting (its ctx ended): a result told is read, not
// reported lost. It takes e.done's signal, if any.
func (e *entry) told() bool {
	if e.wait != nil {
		return e.resolved.Load()
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// batchWait lets the waiter of a batch (Pending.Wait) sleep once for all
// of the batch's messages, rather than once per message: a channel send
// and receive per message, and a wake-up each time the waiter reaches
// one not yet resolved, cost more than the count (BENCHMARKS.md,
// 'Aggregated publishing'). left counts the messages resolved down from
// zero, and the submitter adds how many it submitted once it has
// submitted them all (so the submitter does not share the count's cache
// line with the resolver message by message): whoever brings it back to
// zero tells the waiter.
type batchWait struct {
	left atomic.Int64
	done chan struct{} // capacity 1: signalled once, when left is back to 0
}

func newBatchWait() *batchWait { return &batchWait{done: make(chan struct{}, 1)} }

// release counts one message resolved.
func (w *batchWait) release() {
	if w.left.Add(-1) == 0 {
		w.done <- struct{}{}
	}
}

// submitted counts the n messages submitted, once all of them are.
func (w *batchWait) submitted(n int) {
	if w.left.Add(int64(n)) == 0 {
		w.done <- struct{}{}
	}
}

// await waits until every message is resolved, or ctxDone is closed; it
// reports whether every message is.
func (w *batchWait) await(ctxDone <-chan struct{}) bool {
	select {
	case <-w.done:
		return true
	case <-ctxDone:
	}
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (e *entry) size() int { return len(e.data) + len(e.key) }

// withdraw abandons a queued entry whose caller's ctx has ended, as its
// caller would on seeing the ctx end: the sender calls it before it sends
// the entry, so that a ctx bounds its messages whether or not anyone waits
// for them (StartAll without Wait). It reports whether e is abandoned.
func (e *entry) withdraw() bool {
	done := e.ctx.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		e.state.CompareAndSwap(entryQueued, entryAbandoned)
		return e.state.Load() == entryAbandoned
	default:
		return false
	}
}

// finish marks e done and reports whether its caller is to be told the
// result: not when it was abandoned, which stays so, for a caller that
// comes to wait later to read (see awaitOrCancel).
func (e *entry) finish() bool {
	for {
		s := e.state.Load()
		if s == entryAbandoned {
			return false
		}
		if e.state.CompareAndSwap(s, entryDone) {
			return true
		}
	}
}

// entryPool keeps one batcher's entries: a publish then allocates neither
// its entry nor its done channel. One per batcher, not one per process: a
// channel belongs to the synctest bubble it was made in (as the batcher's
// own channels do), and a process-wide pool handed one bubble's channels
// to a publisher in the next ("select on synctest channel from outside
// bubble"), unless two collections emptied the pool in between.
type entryPool struct{ p sync.Pool }

func (p *entryPool) get() *entry {
	if e, ok := p.p.Get().(*entry); ok {
		return e
	}
	return &entry{done: make(chan struct{}, 1), pool: p}
}

// result reads a resolved entry's result and recycles it.
func (e *entry) result() (Receipt, error) {
	r, err := e.receipt, e.err
	e.recycle()
	return r, err
}

func (e *entry) recycle() {
	done, pool := e.done, e.pool
	*e = entry{done: done, pool: pool} // the atomic state is reset with the rest
	pool.p.Put(e)
}

// batcher coalesces one stream's publishes into PutRecords calls. One
// goroutine (run) owns the queues; each call runs in its own goroutine, at
// most maxInFlight at once, and reports back on results.
//
// Ordering: an entry with a caller-chosen key is "ordered". At most one
// ordered entry per key is unresolved (in a call, or waiting to be retried)
// at any time; the key's later entries wait in its queue until it resolves.
// PutRecords does not order the entries of one request, and a failed entry
// is retried after its successors could have been written, so this is what
// keeps one key's records in publish order.
type batcher struct {
	client kinesisapi.API
	stream string
	cfg    batchConfig
	log    *slog.Logger
	// limit is the stream's learned record size (conn.limits): requests
	// go up to maxBatchBytes once it says the stream takes large records.
	limit *recordLimit

	// ctx bounds the calls; cancelled when a shutdown's wait runs out.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	incoming []*entry
	closing  bool
	wake     chan struct{} // capacity 1: "incoming or closing changed"

	results    chan callResult
	done       chan struct{} // closed when run has returned
	unresolved atomic.Int64  // records submitted and not yet resolved
	entries    entryPool     // this stream's entries (its aggregator's too)

	// Owned by run.
	ready    fifo             // sendable now, in arrival order
	retries  []*entry         // waiting out a backoff
	keys     map[string]*fifo // ordered keys with an unresolved entry → their later entries (nil: none)
	inFlight int              // calls running
	spare    []*entry         // reused buffer for draining incoming
	readyAt  time.Time        // when ready last became non-empty

	// Measurement options of the stream's calls; set when metrics are on.
	callOK, callFailed, retriedEntry metric.MeasurementOption
}

type callResult struct {
	batch []*entry
	out   *kinesis.PutRecordsOutput
	err   error
}

func newBatcher(client kinesisapi.API, stream string, cfg batchConfig, log *slog.Logger) *batcher {
	ctx, cancel := context.WithCancel(context.Background())
	b := &batcher{
		client:  client,
		stream:  stream,
		cfg:     cfg,
		log:     log,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		results: make(chan callResult, cfg.maxInFlight),
		done:    make(chan struct{}),
		keys:    make(map[string]*fifo),
	}
	if t := cfg.tel; t != nil && t.metrics {
		b.callOK = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrOutcome.String("ok")))
		b.callFailed = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrOutcome.String("error")))
		b.retriedEntry = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream)))
	}
	go b.run()
	return b
}

// submit queues one record; records of one key are sent in submit order.
// A non-empty hashKey is sent as the record's ExplicitHashKey.
func (b *batcher) submit(ctx context.Context, key, hashKey string, data []byte, ordered bool, w *batchWait) (*entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, b.errorf(ErrPublish, fmt.Errorf("not sent: %w", err))
	}
	e := b.entries.get()
	e.ctx, e.key, e.hashKey, e.data, e.ordered, e.wait = ctx, key, hashKey, data, ordered, w
	e.state.Store(entryQueued)
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		e.recycle()
		return nil, b.errorf(ErrNotConnected, nil)
	}
	b.incoming = append(b.incoming, e)
	signal := len(b.incoming) == 1
	b.unresolved.Add(1)
	b.mu.Unlock()
	if signal {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return e, nil
}

// unorderedRecord is a record that needs no ordering of the batcher's (an
// aggregator's unit: the aggregator orders its units itself).
type unorderedRecord struct {
	key, hashKey string
	data         []byte
}

// submitMany queues records that need no ordering together, under one lock
// and with one wake-up, so that the batcher takes them into one call when a
// slot is free, rather than the first alone and the rest in the next. It
// appends their entries to out, in order; the records' context is
// Background (nobody abandons them).
func (b *batcher) submitMany(recs []unorderedRecord, out []*entry) ([]*entry, error) {
	start := len(out)
	for _, r := range recs {
		e := b.entries.get()
		e.ctx, e.key, e.hashKey, e.data, e.ordered = context.Background(), r.key, r.hashKey, r.data, false
		e.state.Store(entryQueued)
		out = append(out, e)
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		for i, e := range out[start:] {
			e.recycle()
			out[start+i] = nil
		}
		return out[:start], b.errorf(ErrNotConnected, nil)
	}
	signal := len(b.incoming) == 0
	b.incoming = append(b.incoming, out[start:]...)
	b.unresolved.Add(int64(len(recs)))
	b.mu.Unlock()
	if signal {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return out, nil
}

// await waits for e's result, or for its caller's ctx to end. e is
// recycled once its result is read; an abandoned entry is left to the
// garbage collector, as the batcher may still hold it.
func (b *batcher) await(e *entry) (Receipt, error) {
	if ctxDone := e.ctx.Done(); ctxDone != nil {
		return b.awaitOrCancel(e, ctxDone)
	}
	<-e.done // a context that never ends: a receive is cheaper than a select
	return e.result()
}

// awaitOrCancel is await for a context that can end.
func (b *batcher) awaitOrCancel(e *entry, ctxDone <-chan struct{}) (Receipt, error) {
	select {
	case <-e.done:
		return e.result()
	case <-ctxDone:
	}
	return b.stopped(e)
}

// stopped settles e for a caller whose ctx has ended while it waited: its
// result if it has been told one, else why it has none (never sent, or
// maybe stored). An entry not told is left to the garbage collector, as
// the runtime may still hold it.
func (b *batcher) stopped(e *entry) (Receipt, error) {
	for e.state.Load() == entryEncoding {
		goruntime.Gosched() // the aggregator is reading the message: a few microseconds
	}
	if e.state.CompareAndSwap(entryQueued, entryAbandoned) || e.state.Load() == entryAbandoned {
		// Never sent, or waiting out a backoff (abandoned now, or by the
		// runtime when it came to send it after the ctx ended): nothing
		// more of it will be written (an attempt that got no answer may
		// have been: f says so). f is read after the state is settled: an
		// attempt that failed just before it was abandoned has recorded
		// its failure by then.
		if f := e.failed.Load(); f != nil {
			return Receipt{}, b.errorf(ErrPublish, f.gaveUp(e.ctx.Err()))
		}
		return Receipt{}, b.errorf(ErrPublish, fmt.Errorf("not sent: %w", e.ctx.Err()))
	}
	if e.told() { // resolved just now
		return e.result()
	}
	if f := e.failed.Load(); f != nil {
		return Receipt{}, b.errorf(ErrPublish, maybeStored{fmt.Errorf("%w while attempt %d was in flight (the record may have been written); last error: %w", e.ctx.Err(), f.attempts+1, f.err)})
	}
	return Receipt{}, b.errorf(ErrPublish, maybeStored{fmt.Errorf("%w while the record was in flight: it may have been written", e.ctx.Err())})
}

// failure is an entry's retry history, as its caller reports it.
type failure struct {
	attempts int
	err      error
	// unanswered: an attempt got no answer (its connection failed, its
	// deadline passed), so the service may have stored the record.
	unanswered bool
}

// gaveUp is the cause reported for an entry whose caller's ctx ended
// (ctxErr) before its next attempt: the attempts made, and whether one
// may have stored the record.
func (f *failure) gaveUp(ctxErr error) error {
	if f.unanswered {
		return maybeStored{fmt.Errorf("gave up after %d attempts (an attempt that got no answer may have been written): %w; last error: %w", f.attempts, ctxErr, f.err)}
	}
	return fmt.Errorf("gave up after %d attempts: %w; last error: %w", f.attempts, ctxErr, f.err)
}

// notSentAgain is the cause a shutdown reports for an entry it fails
// before its next attempt.
func (f *failure) notSentAgain() error {
	if f.unanswered {
		return maybeStored{fmt.Errorf("not sent again; an attempt that got no answer may have been written; last error: %w", f.err)}
	}
	return f.err
}

// unanswered says whether a failed call may have stored its records: the
// service did not answer it (the connection failed after the request may
// have gone out, the call's deadline passed, a shutdown cancelled it). A
// refused connection, a failed DNS lookup or missing credentials sent
// nothing.
func unanswered(err error) bool {
	if _, answered := errors.AsType[smithy.APIError](err); answered {
		return false
	}
	if _, dns := errors.AsType[*net.DNSError](err); dns {
		return false
	}
	return !isAccess(err) && !errors.Is(err, syscall.ECONNREFUSED)
}

func (b *batcher) errorf(kind, cause error) *Error {
	return &Error{Kind: kind, Op: "publish", Stream: b.stream, Err: cause}
}

// close stops accepting records; run fails the queued ones with
// ErrNotConnected and returns once the calls in flight have.
func (b *batcher) close() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// wait waits for run to return; when ctx ends first, the calls in flight are
// cancelled (their records fail with ErrNotConnected) and wait returns once
// they have.
func (b *batcher) wait(ctx context.Context) {
	select {
	case <-b.done:
		return
	case <-ctx.Done():
	}
	b.cancel()
	<-b.done
}

func (b *batcher) run() {
	defer close(b.done)
	defer b.cancel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	returned := false // a call has just returned: send what is ready without lingering
	for {
		closing := b.drain()
		if closing {
			b.failQueued()
			if b.inFlight == 0 {
				return
			}
		} else {
			b.dispatch(time.Now(), returned)
		}
		returned = false

		var timerC <-chan time.Time
		if !closing {
			if at, ok := b.nextWake(); ok {
				timer.Reset(time.Until(at))
				timerC = timer.C
			}
		}
		select {
		case <-b.wake:
		case r := <-b.results:
			b.inFlight--
			b.settle(r, time.Now())
			returned = true
		case <-timerC:
		}
	}
}

// drain moves incoming entries into the queues; it reports whether the
// batcher is closing.
func (b *batcher) drain() bool {
	b.mu.Lock()
	in := b.incoming
	b.incoming = b.spare[:0]
	closing := b.closing
	b.mu.Unlock()
	for i, e := range in {
		b.admit(e)
		in[i] = nil
	}
	b.spare = in[:0]
	return closing
}

// admit puts a new entry in the ready queue, or behind its key's unresolved entry.
func (b *batcher) admit(e *entry) {
	if e.ordered {
		if q, busy := b.keys[e.key]; busy {
			if q == nil {
				q = &fifo{}
				b.keys[e.key] = q
			}
			q.push(e)
			return
		}
		b.keys[e.key] = nil // busy, nobody waiting
	}
	b.pushReady(e)
}

func (b *batcher) pushReady(e *entry) {
	if b.ready.len() == 0 {
		b.readyAt = time.Now()
	}
	b.ready.push(e)
}

// resolve ends an entry (result or error) and lets its key's next entry go.
func (b *batcher) resolve(e *entry, r Receipt, err error) {
	b.unresolved.Add(-1)
	key, ordered := e.key, e.ordered // e may be recycled once done is signalled
	if e.finish() {
		e.receipt, e.err = r, err
		e.signal()
	}
	if !ordered {
		return
	}
	if q := b.keys[key]; q != nil {
		if next := q.pop(); next != nil {
			b.pushReady(next)
			return
		}
	}
	delete(b.keys, key)
}

// dispatch starts calls while a slot is free and the policy says send: at
// once when nothing is in flight (an idle stream adds no latency) or a call
// has just returned, when a full batch is ready, or when the oldest ready
// entry has lingered.
func (b *batcher) dispatch(now time.Time, returned bool) {
	for b.inFlight < b.cfg.maxInFlight {
		due := b.dueRetries(now)
		if b.ready.len() == 0 && due == 0 {
			return
		}
		full := b.ready.len()+due >= b.cfg.maxRecords || b.ready.bytes >= b.cfg.maxBytes
		if b.inFlight > 0 && !returned && !full && due == 0 && now.Sub(b.readyAt) < b.cfg.linger {
			return
		}
		returned = false
		batch := b.take(now)
		if len(batch) == 0 {
			continue // every candidate had been abandoned
		}
		b.inFlight++
		go b.call(batch)
	}
}

// dueRetries counts the retries whose backoff has passed.
func (b *batcher) dueRetries(now time.Time) int {
	n := 0
	for _, e := range b.retries {
		if !e.notBefore.After(now) {
			n++
		}
	}
	return n
}

// take builds one request: due retries first (they are the oldest), then
// ready entries in arrival order, within the record and byte limits.
func (b *batcher) take(now time.Time) []*entry {
	batch := make([]*entry, 0, min(b.cfg.maxRecords, b.ready.len()+len(b.retries)))
	bytes := 0
	maxBytes := b.cfg.maxBytes
	if b.limit == nil || !b.limit.large.Load() {
		maxBytes = min(maxBytes, oldBatchBytes)
	}
	limit := b.cfg.maxRecords // lowered by entries being isolated
	fits := func(e *entry) bool {
		if e.maxBatch > 0 && len(batch) >= e.maxBatch {
			return false
		}
		if len(batch) == 0 {
			return true // a record is never larger than a request
		}
		return len(batch) < limit && bytes+e.size() <= maxBytes
	}
	claim := func(e *entry) {
		if !e.withdraw() && e.state.CompareAndSwap(entryQueued, entryInFlight) {
			batch = append(batch, e)
			bytes += e.size()
			if e.maxBatch > 0 {
				limit = min(limit, e.maxBatch)
			}
			return
		}
		b.resolve(e, Receipt{}, nil) // abandoned: release its key
	}
	kept := b.retries[:0]
	for _, e := range b.retries {
		if e.notBefore.After(now) || !fits(e) {
			kept = append(kept, e)
			continue
		}
		claim(e)
	}
	clear(b.retries[len(kept):])
	b.retries = kept
	for b.ready.len() > 0 && fits(b.ready.peek()) {
		claim(b.ready.pop())
	}
	if b.ready.len() > 0 {
		b.readyAt = now
	}
	return batch
}

// call runs one PutRecords request, within the call deadline. A call that
// ends without an answer is retried like any transport failure: the service
// may have stored its records, so they may be stored twice (at least once),
// and their keys are not held any longer than the deadline.
func (b *batcher) call(batch []*entry) {
	recs := make([]types.PutRecordsRequestEntry, len(batch))
	for i, e := range batch {
		recs[i] = types.PutRecordsRequestEntry{Data: e.data, PartitionKey: &e.key}
		if e.hashKey != "" {
			recs[i].ExplicitHashKey = &e.hashKey
		}
	}
	timeout := b.callTimeout(batch)
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	in := &kinesis.PutRecordsInput{Records: recs}
	in.StreamName, in.StreamARN = streamRef(b.stream)
	out, err := b.client.PutRecords(ctx, in, wire.SizedPutRecords, oneAttempt)
	if err != nil && b.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s (the records may have been stored): %w", timeout, err)
	}
	cancel()
	b.results <- callResult{batch: batch, out: out, err: err}
}

// callTimeout is the deadline of a call carrying batch: the configured
// one, which is meant for requests of up to 5 MiB (the limit before large
// records), grown in proportion for a larger request, so that a 10 MiB
// request has the same time per byte.
func (b *batcher) callTimeout(batch []*entry) time.Duration {
	n := 0
	for _, e := range batch {
		n += e.size()
	}
	const base = 5 << 20
	if n <= base {
		return b.cfg.callTimeout
	}
	return time.Duration(float64(b.cfg.callTimeout) * float64(n) / base)
}

// oneAttempt makes a PutRecords call one attempt. The batcher retries what
// fails itself (backoff, the keys held, each resend counted and logged); an
// SDK retry under it would resend unseen, and a resend after a lost answer
// stores its records twice.
func oneAttempt(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} }

// settle hands every entry of a finished call its result, or schedules its retry.
func (b *batcher) settle(r callResult, now time.Time) {
	if r.err == nil && (r.out == nil || len(r.out.Records) != len(r.batch)) {
		r.err = fmt.Errorf("PutRecords answered %d results for %d records", resultCount(r.out), len(r.batch))
	}
	if b.callOK != nil {
		if r.err == nil {
			b.cfg.tel.putCalls.Add(context.Background(), 1, b.callOK)
		} else {
			b.cfg.tel.putCalls.Add(context.Background(), 1, b.callFailed)
		}
	}
	if r.err != nil {
		kind, retry := classifyCallError(r.err)
		if b.ctx.Err() != nil {
			kind, retry = ErrNotConnected, false // a shutdown ran out of time and cancelled the call
			if unanswered(r.err) {
				r.err = maybeStored{fmt.Errorf("cancelled by the shutdown (the records may have been written): %w", r.err)}
			}
		}
		if kind == ErrPublish && !retry && len(r.batch) > 1 && refusedForOneEntry(r.err) {
			b.isolate(r.batch, r.err, now)
			return
		}
		cause := fmt.Errorf("PutRecords: %w", r.err) // one for the batch: errors are immutable
		for _, e := range r.batch {
			if retry {
				b.retry(e, cause, unanswered(r.err), now)
			} else {
				b.resolve(e, Receipt{}, b.errorf(kind, cause))
			}
		}
		return
	}
	for i, e := range r.batch {
		res := &r.out.Records[i]
		if res.ErrorCode == nil {
			b.resolve(e, Receipt{
				Stream:         b.stream,
				ShardID:        deref(res.ShardId),
				SequenceNumber: deref(res.SequenceNumber),
				PartitionKey:   e.key,
			}, nil)
			continue
		}
		cause := &EntryError{Code: *res.ErrorCode, Message: deref(res.ErrorMessage)}
		if retryableCode(cause.Code) {
			b.retry(e, cause, false, now)
		} else {
			b.resolve(e, Receipt{}, b.errorf(ErrPublish, cause))
		}
	}
}

// retry schedules a failed entry after a capped exponential backoff with
// full jitter; its key stays blocked meanwhile. An entry whose caller has
// gone, or whose batcher is closing, is failed instead. unanswered says
// that the attempt may have stored the record.
func (b *batcher) retry(e *entry, cause error, unanswered bool, now time.Time) {
	e.attempts++
	f := &failure{attempts: e.attempts, err: cause, unanswered: unanswered}
	if prev := e.failed.Load(); prev != nil {
		f.unanswered = f.unanswered || prev.unanswered
	}
	if b.ctx.Err() != nil {
		b.resolve(e, Receipt{}, b.errorf(ErrNotConnected, f.notSentAgain()))
		return
	}
	if err := e.ctx.Err(); err != nil {
		b.resolve(e, Receipt{}, b.errorf(ErrPublish, f.gaveUp(err)))
		return
	}
	backoff := b.cfg.retryBase << min(e.attempts-1, 20)
	if backoff <= 0 || backoff > b.cfg.retryMax {
		backoff = b.cfg.retryMax
	}
	e.notBefore = now.Add(randsrc.N(backoff, "publish retry", e.key, uint64(e.attempts)) + 1)
	if b.retriedEntry != nil {
		b.cfg.tel.putRetried.Add(context.Background(), 1, b.retriedEntry)
	}
	e.failed.Store(f)
	b.log.Debug("kinesis publish retry", "stream", b.stream, "partition_key_md5", keyDigest(e.key), "attempt", e.attempts, "err", cause)
	e.state.Store(entryQueued)
	b.retries = append(b.retries, e)
}

// isolate sends the entries of a request the service refused whole, for a
// reason that may be one entry's (a key or record the runtime's checks
// passed), again at once in two halves; a half refused again is split
// again, so the refused entry ends alone and fails alone, and its
// neighbours are stored. The keys stay blocked meanwhile, so their order
// holds. A request of n entries costs at most about 2·log2(n) more calls.
func (b *batcher) isolate(batch []*entry, cause error, now time.Time) {
	half := (len(batch) + 1) / 2
	b.log.Debug("kinesis publish request refused whole; sending it again in halves",
		"stream", b.stream, "records", len(batch), "err", cause)
	for _, e := range batch {
		if err := e.ctx.Err(); err != nil {
			b.resolve(e, Receipt{}, b.errorf(ErrPublish, fmt.Errorf("not sent: %w; last error: PutRecords: %w", err, cause)))
			continue
		}
		e.maxBatch = half
		e.notBefore = now
		e.state.Store(entryQueued)
		b.retries = append(b.retries, e)
	}
}

// refusedForOneEntry says whether a whole-request refusal may be the fault
// of one of its entries: the service validates every entry's key and data
// before it stores any, and answers for the request.
func refusedForOneEntry(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ValidationException", "InvalidArgumentException", "SerializationException":
		return true
	}
	return false
}

// nextWake is when dispatch may next have work without any event: the end
// of the ready entries' linger, or the earliest retry.
func (b *batcher) nextWake() (time.Time, bool) {
	if b.inFlight >= b.cfg.maxInFlight {
		// Nothing can be sent before a call returns, which wakes run. A
		// timer for a retry due meanwhile fires at once once its time
		// has passed, and run would go round its loop sending nothing.
		return time.Time{}, false
	}
	var at time.Time
	if b.ready.len() > 0 {
		at = b.readyAt.Add(b.cfg.linger)
	}
	for _, e := range b.retries {
		if at.IsZero() || e.notBefore.Before(at) {
			at = e.notBefore
		}
	}
	return at, !at.IsZero()
}

// failQueued fails every entry not in flight with ErrNotConnected.
func (b *batcher) failQueued() {
	err := b.errorf(ErrNotConnected, nil)
	for _, e := range b.retries {
		var cause error
		if f := e.failed.Load(); f != nil { // set by retry; not by isolate, whose halves wait here too
			cause = f.notSentAgain()
		}
		b.resolve(e, Receipt{}, b.errorf(ErrNotConnected, cause))
	}
	b.retries = nil
	for b.ready.len() > 0 {
		b.resolve(b.ready.pop(), Receipt{}, err) // resolve may refill ready from a key queue
	}
}

// EntryError is one record's failure inside a PutRecords answer.
type EntryError struct {
	Code    string // for example ProvisionedThroughputExceededException
	Message string
}

func (e *EntryError) Error() string { return e.Code + ": " + e.Message }

// retryableCode says whether a per-record error code may succeed later.
func retryableCode(code string) bool {
	switch code {
	case "ProvisionedThroughputExceededException", "InternalFailure", "InternalFailureException",
		"KMSThrottlingException", "ThrottlingException", "ServiceUnavailable":
		return true
	}
	return false
}

// classifyCallError maps a failed PutRecords call to the error kind its
// records get, and says whether the records should be retried instead.
func classifyCallError(err error) (kind error, retry bool) {
	if isAccess(err) && !isTransport(err) {
		// Missing credentials or a refused identity stay so: retried, the
		// publish would wait out its context (with none, for ever) while the
		// failure showed in debug lines only. A credential fetch that could
		// not reach its own endpoint (instance metadata, STS) is retried
		// like any transport failure.
		return ErrPublish, false
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return ErrPublish, true // transport failure: the service may answer next time
	}
	switch api.ErrorCode() {
	case "ResourceNotFoundException":
		return ErrStream, false
	case "ProvisionedThroughputExceededException", "InternalFailure", "InternalFailureException",
		"KMSThrottlingException", "ThrottlingException", "LimitExceededException",
		"ResourceInUseException", "ServiceUnavailable", "ServiceUnavailableException":
		return ErrPublish, true
	}
	if api.ErrorFault() == smithy.FaultServer {
		return ErrPublish, true
	}
	return ErrPublish, false
}

func resultCount(out *kinesis.PutRecordsOutput) int {
	if out == nil {
		return 0
	}
	return len(out.Records)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// fifo is a queue of entries that tracks their byte total.
type fifo struct {
	items []*entry
	head  int
	bytes int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(e *entry) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, e)
	q.bytes += e.size()
}

func (q *fifo) peek() *entry { return q.items[q.head] }

func (q *fifo) pop() *entry {
	if q.len() == 0 {
		return nil
	}
	e := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	q.bytes -= e.size()
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return e
}
