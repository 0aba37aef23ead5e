package runtime

import (
	"context"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// instrumentationName names the runtime's tracer and meter.
const instrumentationName = "github.com/kinesisgen/kinesisgen/runtime"

// Attribute keys of spans and metrics: OpenTelemetry's messaging semantic
// conventions where they name the thing, kinesisgen.* for the rest.
const (
	attrSystem        = attribute.Key("messaging.system")
	attrOperationName = attribute.Key("messaging.operation.name")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrStream        = attribute.Key("messaging.destination.name")
	attrShard         = attribute.Key("messaging.destination.partition.id")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrConsumerGroup = attribute.Key("messaging.consumer.group.name")
	attrHandler       = attribute.Key("kinesisgen.handler")
	attrOutcome       = attribute.Key("kinesisgen.outcome")
	attrBatchCount    = attribute.Key("messaging.batch.message_count")
)

// systemName is messaging.system of every span.
const systemName = "aws_kinesis"

// WithTracerProvider traces publishes and deliveries through tp: a publish
// starts a producer span ("send STREAM") and carries its W3C trace context
// in the record's headers (traceparent, tracestate), so such a record is
// always an envelope. Deliveries follow OpenTelemetry's messaging
// conventions for batches: a worker (a lane's, a queue subscriber's, a
// Lambda invocation) makes one consumer span ("process STREAM") per batch
// of records it handles back to back (at most 128), linked to each
// record's producer span, rather than a span per record, which cost two
// to three times an untraced delivery's CPU. A handler's
// context carries its record's producer span context as a remote parent
// (parsed only when asked for), so a span the handler starts, a reply or
// a publish made with that context continues the producer's trace.
// Without it nothing is traced and no header is added.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider records the broker's metrics through mp (the README
// lists them). Without it nothing is measured.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// telemetry is a broker's tracer and instruments; nil when neither
// provider is set, so that the record paths pay one nil check.
type telemetry struct {
	tracer trace.Tracer // nil: no traces
	prop   propagation.TextMapPropagator
	app    string

	metrics     bool // the instruments below are set
	published   metric.Int64Counter
	putCalls    metric.Int64Counter
	putRetried  metric.Int64Counter
	handled     metric.Int64Counter
	duration    metric.Float64Histogram
	leasesTaken metric.Int64ObservableCounter
	leasesLost  metric.Int64ObservableCounter
	postponed   metric.Int64ObservableCounter
	leftExpire  metric.Int64ObservableCounter
	queueDepth  metric.Int64ObservableGauge
	behind      metric.Int64ObservableGauge
	ckptAge     metric.Float64ObservableGauge
	readFails   metric.Int64ObservableGauge
	leasesHeld  metric.Int64ObservableGauge
	reg         metric.Registration
}

// newTelemetry makes the tracer and instruments of cfg's providers; it does
// no I/O. Instruments the provider refuses are the API's no-ops.
func newTelemetry(cfg *config, s *state) *telemetry {
	if cfg.tracerProvider == nil && cfg.meterProvider == nil {
		return nil
	}
	t := &telemetry{prop: propagation.TraceContext{}, app: cfg.app}
	if cfg.tracerProvider != nil {
		t.tracer = cfg.tracerProvider.Tracer(instrumentationName)
	}
	if cfg.meterProvider == nil {
		return t
	}
	m := cfg.meterProvider.Meter(instrumentationName)
	t.metrics = true
	t.published, _ = m.Int64Counter("kinesisgen.publish.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages published, by stream and outcome (ok: stored; error: the publish failed)."))
	t.putCalls, _ = m.Int64Counter("kinesisgen.putrecords.calls", metric.WithUnit("{call}"),
		metric.WithDescription("PutRecords calls, by stream and outcome (ok: answered; error: the call failed as a whole)."))
	t.putRetried, _ = m.Int64Counter("kinesisgen.putrecords.retried_entries", metric.WithUnit("{entry}"),
		metric.WithDescription("PutRecords entries sent again after a refusal (throttling, say) or a failed call."))
	t.handled, _ = m.Int64Counter("kinesisgen.handler.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries handled, by stream, handler and outcome (ack, retry, reject, undecodable; skipped: another application's retry copy)."))
	t.duration, _ = m.Float64Histogram("kinesisgen.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a delivery's handling (middleware and handler) took."))
	t.leasesTaken, _ = m.Int64ObservableCounter("kinesisgen.leases.taken", metric.WithUnit("{lease}"),
		metric.WithDescription("Shard leases this instance took, over every subscription."))
	t.leasesLost, _ = m.Int64ObservableCounter("kinesisgen.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Shard leases this instance lost to another, or fenced itself (not renewed in time), over every subscription."))
	t.postponed, _ = m.Int64ObservableCounter("kinesisgen.leases.handoffs_postponed", metric.WithUnit("{handoff}"),
		metric.WithDescription("Handoffs this instance postponed because records it handed out were still being handled (a stuck handler holds its shard), over every subscription."))
	t.leftExpire, _ = m.Int64ObservableCounter("kinesisgen.leases.left_to_expire", metric.WithUnit("{lease}"),
		metric.WithDescription("Shard leases a stop left to expire instead of releasing them, because a handler still ran one of their records when the stop's time ran out, over every subscription."))
	t.queueDepth, _ = m.Int64ObservableGauge("kinesisgen.lane.queue_depth", metric.WithUnit("{record}"),
		metric.WithDescription("Records waiting in a subscription's lanes for a worker."))
	t.behind, _ = m.Int64ObservableGauge("kinesisgen.shard.millis_behind_latest", metric.WithUnit("ms"),
		metric.WithDescription("How far the shard's reader is behind the stream's tip, as the service reports it (MillisBehindLatest)."))
	t.ckptAge, _ = m.Float64ObservableGauge("kinesisgen.shard.checkpoint_age", metric.WithUnit("s"),
		metric.WithDescription("How long records of the shard have waited to be checkpointed (0: everything read is checkpointed)."))
	t.readFails, _ = m.Int64ObservableGauge("kinesisgen.shard.read_failures", metric.WithUnit("{read}"),
		metric.WithDescription("Reads of the shard (GetRecords, GetShardIterator, SubscribeToShard) that have failed in a row; 0 once one answers."))
	t.leasesHeld, _ = m.Int64ObservableGauge("kinesisgen.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Shard leases this instance holds."))
	t.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.observe(s, o)
		return nil
	}, t.queueDepth, t.behind, t.ckptAge, t.readFails, t.leasesHeld, t.leasesTaken, t.leasesLost, t.postponed, t.leftExpire)
	return t
}

// close is called when the broker shuts down. The gauges' callback stays
// registered: a final collection at exit (after Run returns, before the
// meter provider shuts down) still reads the lease counters as they ended
// and the subscriptions' gauges at their final values. It goes with the
// provider.
func (t *telemetry) close() {}

// observe reports the gauges of every running subscription of s, from
// what Broker.Status reads, and the instance's lease counts.
func (t *telemetry) observe(s *state, o metric.Observer) {
	o.ObserveInt64(t.leasesTaken, int64(s.leaseCounts.Taken.Load()))
	o.ObserveInt64(t.leasesLost, int64(s.leaseCounts.Lost.Load()))
	o.ObserveInt64(t.postponed, int64(s.leaseCounts.Postponed.Load()))
	o.ObserveInt64(t.leftExpire, int64(s.leaseCounts.LeftToExpire.Load()))
	s.mu.Lock()
	subs := append([]*Subscription(nil), s.subs...)
	ended := maps.Clone(s.ended)
	s.mu.Unlock()
	for _, sub := range subs {
		delete(ended, sub.stream) // subscribed again
	}
	for _, obs := range ended {
		// Stopped: nothing queued, no lease held. The shards' gauges end
		// with their leases.
		o.ObserveInt64(t.queueDepth, 0, obs.sub)
		o.ObserveInt64(t.leasesHeld, 0, obs.stream)
	}
	now := time.Now()
	for _, sub := range subs {
		sub.mu.Lock()
		r := sub.run
		sub.mu.Unlock()
		if r == nil {
			continue
		}
		st := sub.status()
		o.ObserveInt64(t.queueDepth, int64(st.QueueDepth), r.obs.sub)
		o.ObserveInt64(t.leasesHeld, int64(len(st.Shards)), r.obs.stream)
		for _, sh := range st.Shards {
			attrs := metric.WithAttributes(attrStream.String(sub.stream), attrShard.String(sh.ShardID))
			if !sh.BehindAt.IsZero() {
				o.ObserveInt64(t.behind, sh.MillisBehindLatest, attrs)
			}
			o.ObserveFloat64(t.ckptAge, checkpointAge(sh, r.began, now).Seconds(), attrs)
			// From the shard's Stats, as Status shows it: the reads pay nothing for it.
			o.ObserveInt64(t.readFails, int64(sh.ReadFailures), attrs)
		}
	}
}

// checkpointAge is how long sh's records have waited to be checkpointed:
// 0 when none is in flight, else the time since this instance last stored
// the shard's checkpoint, or, before its first, since the run began.
func checkpointAge(sh ShardStatus, began, now time.Time) time.Duration {
	if sh.InFlight == 0 {
		return 0
	}
	since := sh.CheckpointAt
	if since.IsZero() {
		since = began
	}
	return max(now.Sub(since), 0)
}

// publishObs is the precomputed measurement options of one stream's
// publishes.
type publishObs struct {
	stream, span string // span: the producer span's name
	ok, failed   metric.MeasurementOption
}

func (t *telemetry) publishObs(stream string) publishObs {
	if t == nil {
		return publishObs{}
	}
	po := publishObs{stream: stream, span: "send " + stream}
	if t.metrics {
		po.ok = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrOutcome.String("ok")))
		po.failed = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrOutcome.String("error")))
	}
	return po
}

// startSend starts the producer span of a publish to stream and writes
// its trace context into h, which it returns (made when nil). Without a
// tracer it returns ctx and h as they are and a nil span.
func (t *telemetry) startSend(ctx context.Context, po *publishObs, h Headers) (context.Context, trace.Span, Headers) {
	if t.tracer == nil {
		return ctx, nil, h
	}
	ctx, span := t.tracer.Start(ctx, po.span, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSystem.String(systemName), attrOperationName.String("send"),
			attrOperationType.String("send"), attrStream.String(po.stream)))
	if h == nil {
		h = make(Headers, 2)
	}
	t.prop.Inject(ctx, propagation.MapCarrier(h))
	return ctx, span, h
}

// endSend ends a publish's span (when there is one) and counts it.
func (t *telemetry) endSend(span trace.Span, po publishObs, r Receipt, err error) {
	if t.metrics {
		if err == nil {
			t.published.Add(context.Background(), 1, po.ok)
		} else {
			t.published.Add(context.Background(), 1, po.failed)
		}
	}
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrShard.String(r.ShardID), attrMessageID.String(r.SequenceNumber))
	}
	span.End()
}

// runObs is the precomputed measurement options of one subscription run.
type runObs struct {
	span    string                      // the consumer span's name
	attrs   []attribute.KeyValue        // the consumer span's attributes
	sub     metric.MeasurementOption    // stream, handler
	stream  metric.MeasurementOption    // stream
	outcome [5]metric.MeasurementOption // stream, handler, outcome: by outcomeKind, then undecodable, skipped
	// The same as the variadic arguments of Add and Record, made once: a
	// slice made at each call would be allocated per record.
	outcomeAdd [5][]metric.AddOption
	subRecord  []metric.RecordOption
}

const (
	undecodable = 3 // runObs.outcome's index for a record that did not decode
	skipped     = 4 // runObs.outcome's index for another application's retry copy
)

func (t *telemetry) runObs(stream, handler string) runObs {
	if t == nil {
		return runObs{}
	}
	o := runObs{span: "process " + stream}
	if t.tracer != nil {
		o.attrs = []attribute.KeyValue{attrSystem.String(systemName), attrOperationName.String("process"),
			attrOperationType.String("process"), attrStream.String(stream), attrConsumerGroup.String(t.app)}
	}
	if !t.metrics {
		return o
	}
	o.sub = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrHandler.String(handler)))
	o.stream = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream)))
	o.subRecord = []metric.RecordOption{o.sub}
	for i, name := range []string{"ack", "retry", "reject", "undecodable", "skipped"} {
		o.outcome[i] = metric.WithAttributeSet(attribute.NewSet(attrStream.String(stream), attrHandler.String(handler), attrOutcome.String(name)))
		o.outcomeAdd[i] = []metric.AddOption{o.outcome[i]}
	}
	return o
}

// maxBatchLinks is the most records one process span links to: the SDK's
// default link count limit, past which it drops links.
const maxBatchLinks = 128

// batchSpans makes one worker's consumer spans: one "process STREAM" span
// per batch of records (the messaging conventions' batch process span),
// not one per record, linked to the producer span of each of its records
// that carries a trace context. A batch is what the worker handles back
// to back: a lane worker's takes until its queue is empty, a queue
// worker's records until none is waiting, a Lambda invocation's records;
// at most maxBatchLinks records. The span is made when the batch ends,
// with the time its first record was taken, so the links are gathered in
// a reused slice; each record's trace context is read from its envelope
// only here, without decoding its other headers. Not safe for concurrent
// use (see lockedSpans).
type batchSpans struct {
	t     *telemetry
	ro    *runObs
	began time.Time
	n     int // records in the batch
	links []trace.Link
}

// newBatchSpans is a worker's batchSpans of run ro; nil when t traces
// nothing.
func (t *telemetry) newBatchSpans(ro *runObs) *batchSpans {
	if t == nil || t.tracer == nil {
		return nil
	}
	return &batchSpans{t: t, ro: ro}
}

// take adds a lane take's records, in one batch unless it is full.
func (b *batchSpans) take(recs []shard.Record) {
	if b.n > 0 && b.n+len(recs) > maxBatchLinks {
		b.idle()
	}
	for i := range recs {
		b.add(recs[i].Data)
	}
}

// add adds one record, data as read (an envelope or not), to the batch.
func (b *batchSpans) add(data []byte) {
	if b.n == maxBatchLinks {
		b.idle()
	}
	if b.n == 0 {
		b.began = time.Now()
	}
	b.n++
	if sc, ok := recordTraceContext(data); ok {
		b.links = append(b.links, trace.Link{SpanContext: sc})
	}
}

// idle ends the batch: its span is made and ended.
func (b *batchSpans) idle() {
	if b.n == 0 {
		return
	}
	_, span := b.t.tracer.Start(context.Background(), b.ro.span, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(b.began), trace.WithLinks(b.links...),
		trace.WithAttributes(b.ro.attrs...), trace.WithAttributes(attrBatchCount.Int(b.n)))
	span.End()
	clear(b.links)
	b.links, b.n = b.links[:0], 0
}

// lockedSpans is batchSpans for workers that share one batch (a Lambda
// invocation's).
type lockedSpans struct {
	mu sync.Mutex
	b  batchSpans
}

func (l *lockedSpans) add(data []byte) {
	l.mu.Lock()
	l.b.add(data)
	l.mu.Unlock()
}

func (l *lockedSpans) idle() {
	l.mu.Lock()
	l.b.idle()
	l.mu.Unlock()
}

// producerSpan is the span a handler's context carries when tracing is
// on (see handling.Value): a non-recording span of the producer's span
// context, from its record's traceparent and tracestate headers, so that
// a span the handler starts, or a publish it makes with its context,
// continues the producer's trace. No span is started per record (the
// batch's span links to the producer's), and the header is parsed only
// when something asks for the context's span.
func producerSpan(traceparent, tracestate string) (trace.Span, bool) {
	sc, ok := parseTraceparent(traceparent)
	if !ok {
		return nil, false
	}
	if tracestate != "" {
		if state, err := trace.ParseTraceState(tracestate); err == nil {
			sc = sc.WithTraceState(state)
		}
	}
	return trace.SpanFromContext(trace.ContextWithRemoteSpanContext(context.Background(), sc)), true
}

// spanKey is the key under which the trace API keeps a context's span,
// learnt by asking a probe context for it: a handler's context answers it
// without a context.WithValue per record.
var spanKey = func() any {
	var p keyProbe
	trace.SpanFromContext(&p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(k any) any {
	p.key = k
	return nil
}

// The W3C trace context headers (propagation.TraceContext's).
const (
	traceparentHeader = "traceparent"
	tracestateHeader  = "tracestate"
)

// recordTraceContext is the producer span context that data's envelope
// carries, if any.
func recordTraceContext(data []byte) (trace.SpanContext, bool) {
	tp, ok := envelopeHeader(data, traceparentHeader)
	if !ok {
		return trace.SpanContext{}, false
	}
	sc, ok := parseTraceparent(tp)
	if !ok {
		return sc, false
	}
	if ts, ok := envelopeHeader(data, tracestateHeader); ok && len(ts) > 0 {
		if state, err := trace.ParseTraceState(string(ts)); err == nil {
			sc = sc.WithTraceState(state)
		}
	}
	return sc, true
}

// parseTraceparent parses a W3C traceparent value
// ("00-<trace id>-<span id>-<flags>") without allocating, as
// propagation.TraceContext does: a later version may append fields after
// the four; version ff and all-zero ids are invalid.
func parseTraceparent[S ~string | ~[]byte](s S) (trace.SpanContext, bool) {
	const n = 55
	if len(s) < n || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	ver, ok := hexByte(s[0], s[1])
	if !ok || ver == 0xff || (ver == 0 && len(s) != n) || (ver != 0 && len(s) > n && s[n] != '-') {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		if tid[i], ok = hexByte(s[3+2*i], s[4+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	for i := range sid {
		if sid[i], ok = hexByte(s[36+2*i], s[37+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	flags, ok := hexByte(s[53], s[54])
	if !ok {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// hexByte decodes two lower-case hex digits (W3C trace context allows no
// upper case).
func hexByte(hi, lo byte) (byte, bool) {
	h, l := hexValue[hi], hexValue[lo]
	return h<<4 | l, h|l < 16
}

// hexValue is a byte's value as a lower-case hex digit; 0xff: none.
var hexValue = func() (v [256]byte) {
	for i := range v {
		v[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		v[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		v[c] = byte(c-'a') + 10
	}
	return v
}()

// endProcess counts a handled delivery. kind is an outcomeKind, or
// undecodable.
func (t *telemetry) endProcess(ro *runObs, began time.Time, kind int) {
	if !t.metrics {
		return
	}
	t.handled.Add(context.Background(), 1, ro.outcomeAdd[kind]...)
	if kind != undecodable {
		t.duration.Record(context.Background(), time.Since(began).Seconds(), ro.subRecord...)
	}
}
