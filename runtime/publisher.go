package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// PartitionKeyHeader is the header that names a record's partition key.
const PartitionKeyHeader = "partition-key"

// Headers are a record's user headers.
type Headers map[string]string

// HeaderEncoder is implemented by generated header contracts (and by Headers).
type HeaderEncoder interface{ EncodeHeaders(h Headers) }

// EncodeHeaders copies h into dst, so a header map (for example the
// Headers() of a Delivery) can be passed to Message.Headers as it is.
func (h Headers) EncodeHeaders(dst Headers) { maps.Copy(dst, h) }

// HeaderDecoder is implemented by pointers to generated header contracts.
type HeaderDecoder interface{ DecodeHeaders(h Headers) error }

// Codec turns messages into payloads and back. JSON is the default.
// Unmarshal must copy what it keeps of data: a record's payload shares its
// buffer with the rest of its GetRecords response, which a kept slice would
// keep alive.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Receipt is where a published record landed.
type Receipt struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	PartitionKey   string
	// SubSequence is the message's index in its KPL aggregate (an
	// aggregating publisher's, WithAggregation), 0 for a plain record.
	SubSequence int64
}

// Publisher publishes messages of type T to one stream.
//
// A publish waits for the record's own result: nil once the service has
// stored it, or an *Error (ErrInvalid, ErrPublish, ErrStream or
// ErrNotConnected, naming the stream). Concurrent publishes to one stream
// share PutRecords calls.
type Publisher[T any] interface {
	Publish(ctx context.Context, msg T) error
	Message(msg T) *Message[T]
}

// Message is one publish being built: msg plus optional key and headers.
// It is not safe for concurrent use; build one per publish.
type Message[T any] struct {
	p       *publisher[T]
	msg     T
	key     string
	hasKey  bool
	headers Headers
}

// PartitionKey names the record's key (rung 1 of the key ladder).
func (m *Message[T]) PartitionKey(key string) *Message[T] {
	m.key, m.hasKey = key, true
	return m
}

// Headers adds the fields of a header contract. A field named
// partition-key becomes the record's key (rung 2) rather than a header.
func (m *Message[T]) Headers(h HeaderEncoder) *Message[T] {
	if h != nil {
		h.EncodeHeaders(m.headerMap())
	}
	return m
}

// Header adds one header; PartitionKeyHeader names the key (rung 2).
func (m *Message[T]) Header(name, value string) *Message[T] {
	m.headerMap()[name] = value
	return m
}

func (m *Message[T]) headerMap() Headers {
	if m.headers == nil {
		m.headers = make(Headers)
	}
	return m.headers
}

// Publish publishes the message and waits for its result.
func (m *Message[T]) Publish(ctx context.Context) error {
	_, err := m.Send(ctx)
	return err
}

// Send publishes the message and returns where it landed.
func (m *Message[T]) Send(ctx context.Context) (Receipt, error) {
	return m.p.send(ctx, m.msg, m.key, m.hasKey, m.headers)
}

// PublisherSpec is what a //kinesis:message marker says; generated
// NewXPublisher functions fill it in.
type PublisherSpec struct {
	Stream       string
	PartitionKey string // rung 3 of the key ladder, when no option overrides it
	// Aggregate packs the messages into KPL-aggregated records with the
	// default Aggregation (the aggregate key of //kinesis:message);
	// WithAggregation sets other bounds, WithoutAggregation turns it off.
	Aggregate bool
}

// PublishOption adjusts a publisher at its mount site.
type PublishOption func(*publishSettings)

type publishSettings struct {
	stream       string
	partitionKey string
	hasKey       bool
	aggregate    *Aggregation // nil: plain records
}

// WithPartitionKey names the mount-site key (rung 3 of the key ladder); an
// empty key makes every publish that reaches this rung an ErrPublish error.
func WithPartitionKey(key string) PublishOption {
	return func(s *publishSettings) { s.partitionKey, s.hasKey = key, true }
}

// WithStream publishes to stream instead of the one the spec names.
func WithStream(stream string) PublishOption {
	return func(s *publishSettings) { s.stream = stream }
}

// NewPublisher returns a publisher of T; generated NewXPublisher functions
// call it. It does no I/O and may be called before Connect: each publish
// uses the broker's connection of the moment.
func NewPublisher[T any](b *Broker, spec PublisherSpec, opts ...PublishOption) Publisher[T] {
	s := publishSettings{stream: spec.Stream, partitionKey: spec.PartitionKey, hasKey: spec.PartitionKey != ""}
	if spec.Aggregate {
		s.aggregate = &Aggregation{}
	}
	for _, o := range opts {
		o(&s)
	}
	p := &publisher[T]{b: b, stream: s.stream, key: s.partitionKey, hasKey: s.hasKey}
	if rules.IsARN(s.stream) {
		// Checked once here, reported by every publish (before any I/O).
		if a, err := rules.ParseStreamARN(s.stream); err != nil {
			p.streamErr = err.Error()
		} else {
			p.arnRegion = a.Region
		}
	}
	if b != nil && b.s != nil {
		p.tel = b.s.cfg.tel
		p.obs = p.tel.publishObs(s.stream)
	}
	if s.aggregate != nil {
		agg := s.aggregate.withDefaults()
		p.aggregate = &agg
	}
	return p
}

type publisher[T any] struct {
	b         *Broker
	stream    string
	key       string // mount-site key, when hasKey
	hasKey    bool
	aggregate *Aggregation // with defaults; nil: plain records
	streamErr string       // why a stream named by ARN is not one; "": fine
	arnRegion string       // the region of a stream named by ARN
	tel       *telemetry   // nil: no telemetry
	obs       publishObs
	route     atomic.Pointer[route] // the last connection's batcher and aggregator (see route)
}

func (p *publisher[T]) Publish(ctx context.Context, msg T) error {
	_, err := p.send(ctx, msg, "", false, nil)
	return err
}

func (p *publisher[T]) Message(msg T) *Message[T] { return &Message[T]{p: p, msg: msg} }

// PublishAll publishes every message of msgs and waits for all of them. It
// returns nil when every record was stored, and otherwise the errors of the
// messages that failed, joined (errors.Is and errors.As see each of them).
// The messages are submitted in slice order, so records of one key keep
// that order; a message that cannot be encoded or keyed fails alone. Keys
// come from the publisher's mount-site key, else (ctx being a handler's) the
// key of the record being handled, else a process-unique key per record.
// One goroutine can thus keep whole PutRecords calls busy.
func PublishAll[T any](ctx context.Context, p Publisher[T], msgs []T) error {
	pp, ok := p.(*publisher[T])
	if !ok { // another implementation (a test double): one by one
		var errs []error
		for _, m := range msgs {
			if err := p.Publish(ctx, m); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return pp.publishAll(ctx, msgs)
}

func (p *publisher[T]) publishAll(ctx context.Context, msgs []T) error {
	_, err := submitAll(ctx, len(msgs), false, func(i int) (*publisher[T], T, string, bool, Headers) {
		return p, msgs[i], "", false, nil
	})
	return err
}

// SendAll publishes every message of msgs, each built with its own key and
// headers (Publisher.Message, PartitionKey, Headers), and waits for all of
// them: the batch form of Message.Send, for bulk publishing over many keys
// from few goroutines. receipts[i] is where msgs[i] landed (zero when it
// failed); err is nil when every record was stored, and otherwise the
// errors of the messages that failed, joined. The messages are submitted
// in slice order, so records of one key keep that order; a message that
// cannot be encoded or keyed fails alone. The messages may come from
// different publishers. Plain and aggregating publishers (or aggregating
// ones with different settings) order a key apart, so a message whose key
// the batch last sent through a publisher of the other kind is submitted
// once that message is resolved: each key keeps its slice order either
// way, at the cost of a wait where a key changes kind.
func SendAll[T any](ctx context.Context, msgs []*Message[T]) (receipts []Receipt, err error) {
	return submitAll(ctx, len(msgs), true, func(i int) (*publisher[T], T, string, bool, Headers) {
		m := msgs[i]
		return m.p, m.msg, m.key, m.hasKey, m.headers
	})
}

// StartAll submits every message of msgs, in order, as SendAll does, and
// returns without waiting for them: Wait on the result gives what SendAll
// would have returned. A goroutine can so keep a batch on its way while it
// builds and submits the next, as a KPL producer adds records while earlier
// ones are in flight; submission order is publish order, so a key's
// messages keep their order across batches too, when they go through
// publishers of one kind (within a batch, always: where a key changes
// between plain and aggregating publishers, StartAll waits as SendAll
// does before it goes on). msgs is not kept: it may
// be reused once StartAll returns. ctx bounds the messages as it bounds
// SendAll's, whether or not anyone waits: a message not yet sent when ctx
// ends is never sent (Wait, if called, says "not sent" for it). With a
// tracer or meter, each message's span ends, and its metrics are counted,
// as the batch's messages are resolved, whether or not anyone waits.
func StartAll[T any](ctx context.Context, msgs []*Message[T]) *Pending {
	pd := startAll(ctx, len(msgs), true, func(i int) (*publisher[T], T, string, bool, Headers) {
		m := msgs[i]
		return m.p, m.msg, m.key, m.hasKey, m.headers
	})
	if pd.observed() {
		// The spans end, and the metrics count, when the messages are
		// stored, whether or not the caller waits (a KPL user may never
		// look at a record's future).
		go pd.Wait()
	}
	return pd
}

// Pending is a batch of messages StartAll submitted.
type Pending struct {
	n        int
	receipts bool
	queued   []queuedSend
	errs     []error // of the messages that failed before they were queued
	// batch counts the queued messages down (nil: each is waited for on
	// its own); ctx is the batch's.
	batch *batchWait
	ctx   context.Context

	once sync.Once
	out  []Receipt
	err  error
}

// queuedSend is one queued message of a Pending.
type queuedSend struct {
	i    int
	bt   *batcher
	e    *entry
	tel  *telemetry  // nil: not observed
	obs  *publishObs // the publisher's
	span trace.Span  // nil without a tracer
}

// submitAll submits the n messages that at names (publisher, message, key
// and headers), in order, then waits for every one of them; with receipts
// it returns each one's receipt.
func submitAll[T any](ctx context.Context, n int, receipts bool, at func(i int) (p *publisher[T], msg T, key string, hasKey bool, h Headers)) ([]Receipt, error) {
	return startAll(ctx, n, receipts, at).Wait()
}

// startAll submits the n messages that at names, in order.
func startAll[T any](ctx context.Context, n int, receipts bool, at func(i int) (p *publisher[T], msg T, key string, hasKey bool, h Headers)) *Pending {
	pd := &Pending{n: n, receipts: receipts, queued: make([]queuedSend, 0, n), ctx: ctx}
	var lines keyLines
	var enc jsonSlab // the batch's JSON, with the default codec
	if mixesRoutes(n, at) {
		lines = keyLines{} // which waits for single messages: each has its own signal
	} else {
		pd.batch = newBatchWait()
		defer func() { pd.batch.submitted(len(pd.queued)) }()
	}
	for i := range n {
		p, msg, key, hasKey, h := at(i)
		t := p.tel
		mctx, span := ctx, trace.Span(nil)
		if t != nil {
			mctx, span, h = t.startSend(ctx, &p.obs, h)
		}
		c, rec, err := p.outgoing(mctx, msg, key, hasKey, h, false, &enc)
		if err == nil {
			lines.await(ctx, rec)
			q := queuedSend{i: i, tel: t, obs: &p.obs, span: span}
			rec.wait = pd.batch
			if q.bt, q.e, err = c.submitVia(ctx, rec, &p.route); err == nil {
				lines.add(rec, q.e)
				pd.queued = append(pd.queued, q)
				continue
			}
		}
		if t != nil {
			t.endSend(span, p.obs, Receipt{}, err)
		}
		pd.errs = append(pd.errs, err)
	}
	return pd
}

// A key's records are kept in order by the route they take: the stream's
// batcher for plain records, an aggregator (one per Aggregation setting)
// for aggregated ones. Routes do not order a key between them, so a batch
// that sends one key by two routes waits, before each message that changes
// its key's route, until the key's last message is resolved.

// mixesRoutes says whether the n messages that at names take more than one
// route.
func mixesRoutes[T any](n int, at func(i int) (*publisher[T], T, string, bool, Headers)) bool {
	if n < 2 {
		return false
	}
	first, _, _, _, _ := at(0)
	for i := 1; i < n; i++ {
		if p, _, _, _, _ := at(i); !sameRoute(p.aggregate, first.aggregate) {
			return true
		}
	}
	return false
}

// sameRoute says whether records of publishers with these aggregation
// settings (nil: plain) go the same way.
func sameRoute(a, b *Aggregation) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// keyLines is, per stream and key, the route and entry of a batch's last
// message; nil when the batch takes one route.
type keyLines map[streamKey]lineEnd

type streamKey struct{ stream, key string }

type lineEnd struct {
	route *Aggregation
	e     *entry
}

// await waits, when rec's key last went by another route, until that
// message is resolved (or ctx ends, which withdraws what follows).
func (l keyLines) await(ctx context.Context, rec Outgoing) {
	if l == nil {
		return
	}
	last, ok := l[streamKey{rec.Stream, rec.PartitionKey}]
	if !ok || sameRoute(last.route, rec.aggregate) {
		return
	}
	select {
	case sig := <-last.e.done:
		last.e.done <- sig // done holds one signal, which Wait reads later
	case <-ctx.Done():
	}
}

// add records e as rec's key's last message.
func (l keyLines) add(rec Outgoing, e *entry) {
	if l != nil {
		l[streamKey{rec.Stream, rec.PartitionKey}] = lineEnd{route: rec.aggregate, e: e}
	}
}

// observed says whether any of the queued messages has telemetry.
func (pd *Pending) observed() bool {
	for _, q := range pd.queued {
		if q.tel != nil {
			return true
		}
	}
	return false
}

// Wait waits for every message of the batch and returns what SendAll
// returns: receipts[i] is where msgs[i] landed (zero when it failed), and
// err joins the errors of the messages that failed. Later calls return
// the same.
func (pd *Pending) Wait() (receipts []Receipt, err error) {
	pd.once.Do(func() { pd.out, pd.err = pd.wait() })
	return pd.out, pd.err
}

func (pd *Pending) wait() ([]Receipt, error) {
	var out []Receipt
	if pd.receipts {
		out = make([]Receipt, pd.n)
	}
	errs := pd.errs
	all := false // every queued message is resolved
	if pd.batch != nil {
		all = pd.batch.await(pd.ctx.Done())
	}
	for _, q := range pd.queued {
		var r Receipt
		var err error
		switch {
		case pd.batch == nil:
			r, err = q.bt.await(q.e)
		case all:
			r, err = q.e.result()
		default: // the batch's ctx ended first
			r, err = q.bt.stopped(q.e)
		}
		if q.tel != nil {
			q.tel.endSend(q.span, *q.obs, r, err)
		}
		if err != nil {
			errs = append(errs, err)
		} else if pd.receipts {
			out[q.i] = r
		}
	}
	return out, errors.Join(errs...)
}

// send resolves the key, encodes msg and puts the record.
//
// The garbage collector scans every waiting caller's stack at each cycle,
// so with thousands of callers the waiting frames are kept few and small: a
// caller whose ctx never ends waits here, not in put and await, and the
// work before the wait happens in enqueue's frame, gone by then.
func (p *publisher[T]) send(ctx context.Context, msg T, key string, hasKey bool, h Headers) (Receipt, error) {
	if t := p.tel; t != nil {
		return p.sendObserved(ctx, t, msg, key, hasKey, h)
	}
	return p.sendPlain(ctx, msg, key, hasKey, h)
}

// sendObserved is send with a producer span around it (its trace context
// in the record's headers) and the publish counted.
func (p *publisher[T]) sendObserved(ctx context.Context, t *telemetry, msg T, key string, hasKey bool, h Headers) (Receipt, error) {
	ctx, span, h := t.startSend(ctx, &p.obs, h)
	r, err := p.sendPlain(ctx, msg, key, hasKey, h)
	t.endSend(span, p.obs, r, err)
	return r, err
}

// sendPlain is send without telemetry.
func (p *publisher[T]) sendPlain(ctx context.Context, msg T, key string, hasKey bool, h Headers) (Receipt, error) {
	bt, e, err := p.enqueue(ctx, msg, key, hasKey, h)
	if err != nil {
		return Receipt{}, err
	}
	var r Receipt
	if ctxDone := ctx.Done(); ctxDone != nil {
		r, err = bt.awaitOrCancel(e, ctxDone)
	} else {
		<-e.done
		r, err = e.result()
	}
	switch err := err.(type) {
	case *encodedLarge:
		return p.sendLarge(ctx, err)
	case *codecPanic:
		panic(err.value) // as the encoding would have on this goroutine
	}
	return r, err
}

// enqueue validates msg and queues its record: encoded, or for an
// aggregator to encode (see aggregator.encode).
func (p *publisher[T]) enqueue(ctx context.Context, msg T, key string, hasKey bool, h Headers) (*batcher, *entry, error) {
	c, rec, err := p.outgoing(ctx, msg, key, hasKey, h, p.aggregate != nil && isJSON(p.b.s.cfg.codec), nil)
	if err != nil {
		return nil, nil, err
	}
	return c.submitVia(ctx, rec, &p.route)
}

// outgoing resolves the key and encodes msg into the record to put, on the
// broker's connection of the moment; later leaves the encoding (JSON) to
// the record's aggregator (a lone Publish: see aggregator.encode); enc, if
// not nil, encodes it when the codec is JSON (a batch's messages share its
// slabs). It checks
// the stream name, the key and the headers itself (before the connection,
// whose error comes after theirs), so the record goes to conn.submit, which
// does not check them again.
func (p *publisher[T]) outgoing(ctx context.Context, msg T, key string, hasKey bool, h Headers, later bool, enc *jsonSlab) (*conn, Outgoing, error) {
	if p.stream == "" {
		return nil, Outgoing{}, &Error{Kind: ErrInvalid, Op: "publish", Err: errors.New("empty stream name")}
	}
	if p.streamErr != "" {
		return nil, Outgoing{}, &Error{Kind: ErrInvalid, Op: "publish", Stream: p.stream, Err: errors.New(p.streamErr)}
	}
	key, unique, h, err := p.resolveKey(ctx, key, hasKey, h)
	if err == nil {
		err = checkHeaders(h)
	}
	if err != nil {
		return nil, Outgoing{}, &Error{Kind: ErrPublish, Op: "publish", Stream: p.stream, Err: err}
	}
	c, err := p.b.connection()
	if err != nil {
		return nil, Outgoing{}, &Error{Kind: ErrNotConnected, Op: "publish", Stream: p.stream}
	}
	if p.arnRegion != "" && c.region != "" && p.arnRegion != c.region {
		if err := c.checkRegion(p.stream); err != nil {
			return nil, Outgoing{}, &Error{Kind: ErrInvalid, Op: "publish", Stream: p.stream, Err: err}
		}
	}
	if later {
		return c, Outgoing{Stream: p.stream, PartitionKey: key, Headers: h, uniqueKey: unique, aggregate: p.aggregate,
			value: msg, encode: true}, nil
	}
	var payload []byte
	if codec := p.b.s.cfg.codec; enc != nil && isJSON(codec) {
		payload, err = enc.marshal(msg)
	} else {
		payload, err = codec.Marshal(msg)
	}
	if err != nil {
		return nil, Outgoing{}, &Error{Kind: ErrPublish, Op: "encode", Stream: p.stream, Err: err}
	}
	return c, Outgoing{Stream: p.stream, PartitionKey: key, Headers: h, Payload: payload, uniqueKey: unique, aggregate: p.aggregate}, nil
}

// sendLarge submits a message that its aggregator encoded and handed back,
// its record being over MaxRecordSize: the stream's own size, which may
// take a call to learn, says whether it is sent (plain) or refused.
func (p *publisher[T]) sendLarge(ctx context.Context, large *encodedLarge) (Receipt, error) {
	c, err := p.b.connection()
	if err != nil {
		return Receipt{}, &Error{Kind: ErrNotConnected, Op: "publish", Stream: p.stream}
	}
	rec := Outgoing{Stream: p.stream, PartitionKey: large.key, Headers: large.headers, Payload: large.payload, aggregate: p.aggregate}
	bt, e, err := c.submitVia(ctx, rec, &p.route)
	if err != nil {
		return Receipt{}, err
	}
	return bt.await(e)
}

// resolveKey walks the key ladder: the PartitionKey step, the partition-key
// header, the mount-site key, the key of the record being handled (when
// ctx is a handler's), a process-unique key. A key that is given is used
// as it is, so an empty one is an error rather than a silent fall to a
// lower rung; only a publish that names no key at all gets a unique one.
// It returns the headers to encode, without the partition-key entry, which
// never travels in the envelope.
func (p *publisher[T]) resolveKey(ctx context.Context, key string, hasKey bool, h Headers) (string, bool, Headers, error) {
	hk, inHeader := h[PartitionKeyHeader]
	if inHeader {
		delete(h, PartitionKeyHeader)
	}
	from := ""
	switch {
	case hasKey:
		from = "the PartitionKey step"
	case inHeader:
		key, from = hk, "the "+PartitionKeyHeader+" header"
	case p.hasKey:
		key, from = p.key, "the mount-site key (partition_key=, WithPartitionKey)"
	default:
		// A handled record's key may come from another producer (a KPL
		// sub-record, say) and break the service's rule; it names nothing
		// a publish can keep, so such a record's replies spread.
		if hk, ok := handledKey(ctx); ok && checkKey(hk) == nil {
			return hk, false, h, nil
		}
		return uniqueKey(), true, h, nil
	}
	if err := checkKey(key); err != nil {
		return "", false, h, fmt.Errorf("%w, named by %s", err, from)
	}
	return key, false, h, nil
}

// checkHeaders applies the generator's rules for header tags to the headers
// of a publish.
func checkHeaders(h Headers) error {
	if len(h) == 0 {
		return nil // most messages: not even a range's iterator to start
	}
	for name, value := range h {
		if err := rules.Header(name, value); err != nil {
			return err
		}
	}
	return nil
}
