// Package kinesislambda runs a broker's mounted subscribers as an AWS
// Lambda function behind a Kinesis event source mapping. The mapping reads
// the shards and keeps their positions; the handlers do not change:
//
//	b := runtime.NewBroker()
//	orders.Mount(b)
//	lambda.Start(kinesislambda.Handler(b))
//
// Each event record goes to the subscriber mounted for its stream (named
// by the record's eventSourceARN) and is decoded as the consumer decodes
// it: envelope and headers, foreign plain records, KPL aggregates
// de-aggregated. workers= and by_key apply inside one batch (each key's
// records in order); Ack, Retry (a copy at the stream's tip, or with
// retry=in_place handled again in its lane within the invocation, its
// key's later records waiting), Reject and dead_letter= behave as in the
// consumer; panics are recovered; middleware, traces and metrics are the
// broker's.
//
// The response reports the earliest record that failed (the mapping needs
// FunctionResponseTypes ReportBatchItemFailures) so the mapping resumes
// there: nothing after a failure is skipped, and records after it that were
// handled already are handled again (delivery is at least once). A record
// fails when its stream has no subscriber, when a republish (retry copy,
// dead letter) is not stored in time, when it cannot start before the
// invocation's deadline less a margin, or when an in-place retry's next
// attempt could not (the record is then left unsettled and delivered
// again, from Attempt 1). See docs/lambda.md.
package kinesislambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/internal/inline"
	"github.com/kinesisgen/kinesisgen/runtime/internal/md5x"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// DefaultMargin is how long before the invocation's deadline records stop
// being started and running ones see their context end, so the response
// (with those records as failures) is sent before Lambda times the
// invocation out.
const DefaultMargin = 2 * time.Second

// ErrBadEvent is matched (errors.Is) by the error of an invocation whose
// event is not a Kinesis event source mapping's: no records, a record of
// another source, or one without a stream ARN or sequence number. The
// invocation fails whole, so nothing in it counts as handled.
var ErrBadEvent = errors.New("kinesislambda: not a Kinesis event")

// EventError is the error of a bad event (it matches ErrBadEvent); Lambda
// reports it with errorType "EventError".
type EventError struct{ Reason string }

func (e *EventError) Error() string   { return ErrBadEvent.Error() + ": " + e.Reason }
func (e *EventError) Is(t error) bool { return t == ErrBadEvent }

// Option configures Handler.
type Option func(*settings)

type settings struct {
	margin     time.Duration
	logger     *slog.Logger
	wholeBatch bool
}

// WithoutItemFailures is for a mapping without FunctionResponseTypes
// ReportBatchItemFailures, which reads no failure from a response: a
// failed record then fails the invocation with an error (a
// *RecordError), so the mapping retries the whole batch instead of
// going past the record.
func WithoutItemFailures() Option { return func(s *settings) { s.wholeBatch = true } }

// RecordError is the error of an invocation made WithoutItemFailures in
// which a record failed: the earliest failed record's sequence number.
type RecordError struct{ SequenceNumber string }

func (e *RecordError) Error() string {
	return "kinesislambda: record " + e.SequenceNumber + " failed; the batch is retried from its start"
}

// WithMargin sets how long before the invocation's deadline the handler
// stops starting records (DefaultMargin). A margin of 0 or less keeps the
// default.
func WithMargin(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.margin = d
		}
	}
}

// Handler is the Lambda handler for b's mounted subscribers, for
// lambda.Start. Mount every subscriber before the first invocation. The
// first invocation connects b (without starting its subscriptions: nothing
// polls or takes leases); warm invocations reuse the connection. A failed
// connect fails the invocation whole, and the next one tries again.
func Handler(b *runtime.Broker, opts ...Option) func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error) {
	h := &handler{b: b, set: settings{margin: DefaultMargin}, subs: map[string]inline.Sub{}}
	for _, o := range opts {
		if o != nil {
			o(&h.set)
		}
	}
	if b != nil {
		h.set.logger = b.Logger()
	} else {
		h.set.logger = slog.Default()
	}
	return h.handle
}

type handler struct {
	b   *runtime.Broker
	set settings

	mu        sync.Mutex
	connected bool
	subs      map[string]inline.Sub
}

// unit is one user record to handle: event record idx, or its sub-record
// sub when it is a KPL aggregate (sub -1: the record itself). Units are
// small so a 10k-record batch costs little beyond its records.
type unit struct {
	idx int32
	sub int32
}

func (h *handler) handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	if len(ev.Records) == 0 {
		// A mapping never sends an empty batch: this is another event (one
		// of another source has other fields) and acking it would hide that.
		return events.KinesisEventResponse{}, &EventError{Reason: "no records"}
	}
	streams := make([]string, len(ev.Records))
	for i, r := range ev.Records {
		if err := checkRecord(r); err != nil {
			return events.KinesisEventResponse{}, &EventError{Reason: fmt.Sprintf("record %d: %v", i, err)}
		}
		streams[i] = streamARN(r.EventSourceArn)
	}
	if err := h.connect(ctx); err != nil {
		return events.KinesisEventResponse{}, err
	}

	hctx, cancel := h.deadline(ctx)
	defer cancel()
	b := newBatch(ev.Records)
	// Units per subscriber, in event order (one stream per batch in
	// practice; several are handled one after the other).
	var order []string
	groups := map[string][]unit{}
	for i, r := range ev.Records {
		s := streams[i]
		sub := h.sub(s)
		if sub == nil {
			h.set.logger.Error("no subscriber mounted for the record's stream: record failed",
				"stream", s, "sequence", r.Kinesis.SequenceNumber, "mounted", inline.Streams(h.b))
			b.fail(i)
			continue
		}
		if _, ok := groups[s]; !ok {
			order = append(order, s)
			groups[s] = make([]unit, 0, len(ev.Records)-i) // one stream per batch, as a rule
		}
		groups[s] = b.appendUnits(groups[s], i)
	}
	for _, s := range order {
		b.run(hctx, s, h.sub(s), groups[s])
	}
	// An empty list, not null: success says so explicitly.
	resp := events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{}}
	if i := b.first.Load(); i < int64(len(ev.Records)) {
		seq := ev.Records[i].Kinesis.SequenceNumber
		if h.set.wholeBatch {
			return events.KinesisEventResponse{}, &RecordError{SequenceNumber: seq}
		}
		resp.BatchItemFailures = []events.KinesisBatchItemFailure{{ItemIdentifier: seq}}
	}
	return resp, nil
}

// deadline is the handlers' context: the invocation's, ending the margin
// before its deadline.
func (h *handler) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-h.set.margin))
	}
	return context.WithCancel(ctx)
}

func (h *handler) connect(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.connected {
		return nil
	}
	if h.b == nil {
		return &runtime.Error{Kind: runtime.ErrInvalid, Op: "lambda", Err: errors.New("nil broker: make one with NewBroker")}
	}
	if err := inline.Connect(ctx, h.b); err != nil {
		return err
	}
	h.connected = true
	return nil
}

// sub is the subscriber of the stream arn names: one mounted by that ARN,
// else one mounted by the stream's name.
func (h *handler) sub(arn string) inline.Sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.subs[arn]; ok {
		return s
	}
	s, ok := inline.Lookup(h.b, arn)
	if !ok {
		name, _ := StreamOf(arn)
		if s, ok = inline.Lookup(h.b, name); !ok {
			return nil // looked up again next time: a later Mount is seen
		}
	}
	h.subs[arn] = s
	return s
}

// checkRecord checks that r is a Kinesis record of a stream named by its
// eventSourceARN (a stream's, or an enhanced fan-out consumer's, which
// names its stream).
func checkRecord(r events.KinesisEventRecord) error {
	if r.EventSource != "" && r.EventSource != "aws:kinesis" {
		return fmt.Errorf("event source %q", r.EventSource)
	}
	if r.Kinesis.SequenceNumber == "" {
		return errors.New("no sequence number")
	}
	_, err := StreamOf(r.EventSourceArn)
	return err
}

// streamARN is the stream's ARN in an eventSourceARN checked by StreamOf:
// a consumer's ARN without its consumer part.
// It is a prefix of the consumer's, so nothing is allocated.
func streamARN(arn string) string {
	i := strings.Index(arn, ":stream/") + len(":stream/")
	if j := strings.IndexByte(arn[i:], '/'); j >= 0 {
		return arn[:i+j]
	}
	return arn
}

// StreamOf returns the stream name an eventSourceARN names: a stream's ARN
// (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME) or one of its consumers'
// (…:stream/NAME/consumer/CONSUMER:TIMESTAMP).
func StreamOf(arn string) (string, error) {
	_, rest, ok := strings.Cut(arn, ":stream/")
	if !ok || !strings.HasPrefix(arn, "arn:") {
		return "", fmt.Errorf("eventSourceARN %q names no Kinesis stream", arn)
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "" {
		return "", fmt.Errorf("eventSourceARN %q names no Kinesis stream", arn)
	}
	return name, nil
}

// shardOf is the shard in an eventID ("shardId-000000000000:SEQUENCE").
func shardOf(eventID string) string {
	s, _, _ := strings.Cut(eventID, ":")
	return s
}

// appendUnits appends the user records of event record i: the
// sub-records of a KPL aggregate, each with its own key, or the record
// itself (a corrupt aggregate too, which the subscriber rejects as
// undecodable).
func (b *batch) appendUnits(us []unit, i int) []unit {
	if i >= b.verifiedTo {
		b.verify(i)
	}
	deaggregate := kpl.Deaggregate
	if b.verified[i] {
		deaggregate = kpl.DeaggregateVerified
	}
	subs, ok, err := deaggregate(b.records[i].Kinesis.Data)
	if !ok || err != nil {
		return append(us, unit{idx: int32(i), sub: -1})
	}
	if b.aggs == nil {
		b.aggs = map[int32][]kpl.Record{}
	}
	b.aggs[int32(i)] = subs
	for j := range subs {
		us = append(us, unit{idx: int32(i), sub: int32(j)})
	}
	return us
}

// key is u's partition key.
func (b *batch) key(u unit) string {
	if u.sub >= 0 {
		return b.aggs[u.idx][u.sub].PartitionKey
	}
	return b.records[u.idx].Kinesis.PartitionKey
}

// record is u as the subscriber handles it.
func (b *batch) record(stream string, u unit) inline.Record {
	r := &b.records[u.idx]
	rec := inline.Record{
		Stream:         stream,
		ShardID:        shardOf(r.EventID),
		SequenceNumber: r.Kinesis.SequenceNumber,
		PartitionKey:   r.Kinesis.PartitionKey,
		Data:           r.Kinesis.Data,
		ArrivalTime:    r.Kinesis.ApproximateArrivalTimestamp.Time,
	}
	if u.sub >= 0 {
		s := &b.aggs[u.idx][u.sub]
		rec.PartitionKey, rec.Data, rec.SubSequence = s.PartitionKey, s.Data, s.SubSequence
	}
	return rec
}

// batch is one invocation's records and its earliest failure.
type batch struct {
	records []events.KinesisEventRecord
	aggs    map[int32][]kpl.Record // the sub-records of the aggregates, by record
	first   atomic.Int64           // index of the earliest failed record; len(records) when none
	// verified[i]: record i is an aggregate whose MD5 matched; the
	// records before verifiedTo are checked, sixteen at a time (verify).
	verified   []bool
	verifiedTo int
}

func newBatch(records []events.KinesisEventRecord) *batch {
	b := &batch{records: records, verified: make([]bool, len(records))}
	b.first.Store(int64(len(records)))
	return b
}

// verify checks the MD5 trailers of the aggregates among the md5x.Lanes
// records from i at once (kpl.VerifyAll), just before they are expanded,
// while their data is in the cache.
func (b *batch) verify(i int) {
	var datas [md5x.Lanes][]byte
	end := min(len(b.records), i+len(datas))
	for j := i; j < end; j++ {
		datas[j-i] = b.records[j].Kinesis.Data
	}
	kpl.VerifyAll(b.verified[i:end], datas[:end-i])
	b.verifiedTo = end
}

func (b *batch) fail(i int) {
	for {
		cur := b.first.Load()
		if int64(i) >= cur || b.first.CompareAndSwap(cur, int64(i)) {
			return
		}
	}
}

// handleUnit runs one unit unless it need not run or is too late to start.
// A record after the earliest failure is delivered again from there anyway,
// and running it now would hand its key's records over out of order.
func (b *batch) handleUnit(ctx context.Context, stream string, r inline.Run, u unit) {
	if int64(u.idx) > b.first.Load() {
		return
	}
	if ctx.Err() != nil {
		b.fail(int(u.idx)) // not started before the deadline less the margin
		return
	}
	if !r.Handle(b.record(stream, u)) {
		b.fail(int(u.idx))
	}
}

// run handles us with sub's workers: with by_key, one lane per worker and
// each key on one lane, in order; otherwise the workers take the units in
// turn. One worker handles them in order on the invocation's goroutine.
func (b *batch) run(ctx context.Context, stream string, sub inline.Sub, us []unit) {
	r := sub.Begin(ctx)
	defer r.End()
	n := min(sub.Workers(), len(us))
	if n <= 1 {
		for _, u := range us {
			b.handleUnit(ctx, stream, r, u)
		}
		return
	}
	var wg sync.WaitGroup
	if sub.ByKey() {
		lanes := make([][]unit, n)
		for _, u := range us {
			j := keyLane(b.key(u), n)
			lanes[j] = append(lanes[j], u)
		}
		for _, lane := range lanes {
			if len(lane) == 0 {
				continue
			}
			wg.Go(func() {
				for _, u := range lane {
					b.handleUnit(ctx, stream, r, u)
				}
			})
		}
	} else {
		var next atomic.Int64
		for range n {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(len(us)) {
						return
					}
					b.handleUnit(ctx, stream, r, us[i])
				}
			})
		}
	}
	wg.Wait()
}

// keyLane is FNV-1a of the key, modulo n.
func keyLane(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// Decode reads a Kinesis event as the Lambda runtime would hand it over
// (records' data in base64), for tests and tools that feed Handler by
// hand. A record whose data is not base64 fails the whole event.
func Decode(payload []byte) (events.KinesisEvent, error) {
	var ev events.KinesisEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return events.KinesisEvent{}, &EventError{Reason: err.Error()}
	}
	return ev, nil
}
