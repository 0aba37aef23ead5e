package telemetry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

const testTimeout = 20 * time.Second

type order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

type receipt struct {
	Order int `json:"order"`
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, ctx context.Context, b *runtime.Broker) {
	t.Helper()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A trace runs from the caller's span through the publish of an order, its
// handler (twice: the first attempt retries), the reply that handler
// publishes and the reply's handler: each producer span is the child of
// the span of the context it was published with, each consumer span the
// child of the producer span whose context its record carries, all in one
// trace, with the stream, shard, sequence number and attempt on the
// consumer spans. Aggregated publishing carries the context in each
// message of an aggregate.
func TestTraceRunsFromPublishThroughHandlerAndReplyToItsHandler(t *testing.T) {
	for _, aggregate := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", aggregate), func(t *testing.T) {
			ctx := testCtx(t)
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

			b := kinesistest.NewBroker(runtime.WithTracerProvider(tp), runtime.WithApplication("shop"))
			replies := runtime.NewPublisher[receipt](b, runtime.PublisherSpec{Stream: "receipts", Aggregate: aggregate})
			if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
				if d.Attempt == 1 {
					return runtime.Retry()
				}
				return runtime.ReplyOutcome(ctx, replies, receipt{Order: o.ID}, nil)
			}, runtime.CreateIfMissing(2), runtime.StartAt(runtime.Horizon())); err != nil {
				t.Fatal(err)
			}
			seen := make(chan trace.SpanContext, 1)
			if _, err := runtime.Subscribe(b, "receipts", func(ctx context.Context, r receipt, d runtime.Delivery) runtime.Outcome {
				seen <- trace.SpanContextFromContext(ctx)
				return runtime.Ack()
			}, runtime.CreateIfMissing(1), runtime.StartAt(runtime.Horizon())); err != nil {
				t.Fatal(err)
			}
			connect(t, ctx, b)

			pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders", Aggregate: aggregate})
			rootCtx, root := tp.Tracer("test").Start(ctx, "checkout")
			if err := pub.Message(order{ID: 1, Customer: "ada"}).PartitionKey("ada").Publish(rootCtx); err != nil {
				t.Fatal(err)
			}
			root.End()
			var handlerSpan trace.SpanContext
			select {
			case handlerSpan = <-seen:
			case <-ctx.Done():
				t.Fatal("the reply was not handled")
			}
			var spans tracetest.SpanStubs
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				// The last consumer span ends after its handler returned.
				// Every process span is made once its batch is handled: wait
				// for the reply's and for both deliveries of the order.
				spans = exp.GetSpans()
				receipts, orders := false, 0
				for _, s := range spans {
					receipts = receipts || s.Name == "process receipts"
					if s.Name == "process orders" {
						orders += len(s.Links)
					}
				}
				if receipts && orders >= 2 || time.Now().After(deadline) {
					break
				}
			}
			byName := map[string][]tracetest.SpanStub{}
			var names []string
			for _, s := range spans {
				byName[s.Name] = append(byName[s.Name], s)
				names = append(names, s.Name)
			}
			slices.Sort(names)
			// The retry copy is in a batch of its own or in the original's.
			want := []string{"checkout", "process orders", "process orders", "process receipts", "send orders", "send receipts"}
			if len(byName["process orders"]) == 1 {
				want = slices.Delete(want, 1, 2)
			}
			if !slices.Equal(names, want) {
				t.Fatalf("spans %q, want %q", names, want)
			}
			sendOrders, sendReceipts := byName["send orders"][0], byName["send receipts"][0]
			processReceipts := byName["process receipts"][0]
			checkParent := func(child, parent tracetest.SpanStub) {
				t.Helper()
				if child.SpanContext.TraceID() != root.SpanContext().TraceID() {
					t.Errorf("%s is in trace %s, not the caller's %s", child.Name, child.SpanContext.TraceID(), root.SpanContext().TraceID())
				}
				if child.Parent.SpanID() != parent.SpanContext.SpanID() {
					t.Errorf("%s's parent is %s, want %s (%s)", child.Name, child.Parent.SpanID(), parent.SpanContext.SpanID(), parent.Name)
				}
			}
			checkLink := func(consumer, producer tracetest.SpanStub) {
				t.Helper()
				for _, l := range consumer.Links {
					if l.SpanContext.Equal(producer.SpanContext.WithRemote(true)) {
						return
					}
				}
				t.Errorf("%s links to %v, not to %s's %s", consumer.Name, consumer.Links, producer.Name, producer.SpanContext.SpanID())
			}
			checkParent(sendOrders, byName["checkout"][0])
			linked := 0
			for i, p := range byName["process orders"] {
				checkLink(p, sendOrders) // the retry copy carries the original's context
				linked += len(p.Links)
				a := attrs(p)
				if p.SpanKind != trace.SpanKindConsumer || a["messaging.destination.name"].AsString() != "orders" ||
					a["messaging.batch.message_count"].AsInt64() != int64(len(p.Links)) || a["messaging.system"].AsString() != "aws_kinesis" ||
					a["messaging.operation.type"].AsString() != "process" || a["messaging.consumer.group.name"].AsString() != "shop" {
					t.Errorf("process span %d: kind %v, attributes %v", i, p.SpanKind, p.Attributes)
				}
			}
			if linked != 2 {
				t.Errorf("the process spans link to %d records, want 2 (the order and its retry copy)", linked)
			}
			// The handler's context carries the producer's context: its
			// reply's span is the child of the order's.
			checkParent(sendReceipts, sendOrders)
			checkLink(processReceipts, sendReceipts)
			if sendOrders.SpanKind != trace.SpanKindProducer || !strings.HasPrefix(attrs(sendOrders)["messaging.destination.partition.id"].AsString(), "shardId-") {
				t.Errorf("send span: kind %v, attributes %v", sendOrders.SpanKind, sendOrders.Attributes)
			}
			if handlerSpan.SpanID() != sendReceipts.SpanContext.SpanID() || !handlerSpan.IsRemote() {
				t.Errorf("the handler's context carries span %s, not its record's producer span %s", handlerSpan.SpanID(), sendReceipts.SpanContext.SpanID())
			}
		})
	}
}

// Every handled record's producer span is reachable from the consumer
// side's spans: one of them links to it (a batch's process span) or is
// its child (a span the handler started with its context), with by-key
// lanes (takes of many records, over several shards), without, through a
// queue, and in Lambda (invocations of 200 records: more than one process
// span's links).
func TestEveryHandledRecordsProducerSpanIsReachable(t *testing.T) {
	for _, mode := range []string{"byKey", "lanes", "queue", "lambda"} {
		t.Run(mode, func(t *testing.T) {
			const n = 600
			ctx := testCtx(t)
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			pb, srv := kinesistest.NewBrokerServer(runtime.WithTracerProvider(tp))
			if mode == "queue" {
				if err := srv.AddOnDemandStream("orders"); err != nil {
					t.Fatal(err)
				}
			} else if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(4)}); err != nil {
				t.Fatal(err)
			}
			pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
			connect(t, ctx, pb)
			msgs := make([]order, n)
			for i := range msgs {
				msgs[i] = order{ID: i, Customer: fmt.Sprint("c", i%37)}
			}
			if err := runtime.PublishAll(ctx, pub, msgs); err != nil {
				t.Fatal(err)
			}
			var handled atomic.Int64
			done := make(chan struct{})
			opts := []runtime.SubscribeOption{runtime.Workers(4)}
			switch mode {
			case "byKey":
				opts = append(opts, runtime.ByKey(), runtime.StartAt(runtime.Horizon()))
			case "lanes":
				opts = append(opts, runtime.StartAt(runtime.Horizon()))
			case "queue":
				arn, err := srv.AddQueue("orders", "work", nil)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, runtime.Queue(arn))
			}
			cb := srv.NewBroker(runtime.WithTracerProvider(tp))
			if _, err := runtime.Subscribe(cb, "orders", func(ctx context.Context, o order, _ runtime.Delivery) runtime.Outcome {
				if o.ID%5 == 0 { // some handlers start spans of their own
					_, s := tp.Tracer("handler").Start(ctx, "handle")
					s.End()
				}
				if handled.Add(1) == n {
					close(done)
				}
				return runtime.Ack()
			}, opts...); err != nil {
				t.Fatal(err)
			}
			if mode == "lambda" {
				if _, err := srv.Drain(ctx, kinesistest.EventSourceMapping{Stream: "orders", Function: kinesislambda.Handler(cb), BatchSize: 200}); err != nil {
					t.Fatal(err)
				}
			} else {
				connect(t, ctx, cb)
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatalf("handled %d of %d", handled.Load(), n)
			}
			if err := cb.Shutdown(ctx); err != nil { // ends the last batch's span
				t.Fatal(err)
			}
			reached := map[trace.SpanID]bool{}
			var sends []tracetest.SpanStub
			maxBatch, batches := 0, 0
			for _, s := range exp.GetSpans() {
				if s.Name == "send orders" {
					sends = append(sends, s)
					continue
				}
				// Reached by a link or as a parent, whatever the span.
				for _, l := range s.Links {
					reached[l.SpanContext.SpanID()] = true
				}
				if s.Parent.IsValid() {
					reached[s.Parent.SpanID()] = true
				}
				if s.Name == "process orders" {
					if c := attrs(s)["messaging.batch.message_count"].AsInt64(); c != int64(len(s.Links)) || s.SpanKind != trace.SpanKindConsumer {
						t.Errorf("process span of kind %v counts %d records, links %d", s.SpanKind, c, len(s.Links))
					}
					maxBatch = max(maxBatch, len(s.Links))
					batches++
				}
			}
			if len(sends) != n {
				t.Fatalf("%d send spans, want %d", len(sends), n)
			}
			missing := 0
			for _, s := range sends {
				if !reached[s.SpanContext.SpanID()] {
					missing++
				}
			}
			if missing > 0 {
				t.Errorf("%d of %d producer spans reached by no consumer-side span", missing, n)
			}
			t.Logf("%d records in %d process spans, at most %d in one", n, batches, maxBatch)
			if (mode == "byKey" || mode == "lambda") && maxBatch < 2 {
				t.Errorf("batches linked at most %d records: no batch span", maxBatch)
			}
			if batches >= n {
				t.Errorf("%d process spans for %d records: a span per record", batches, n)
			}
		})
	}
}

// A record whose publisher has a tracer carries its trace context in its
// headers; without one, a record published with no headers stays the
// plain payload that any Kinesis consumer reads.
func TestTraceContextIsTheOnlyHeaderOfATracedRecord(t *testing.T) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader, srv := kinesistest.NewBrokerServer()
	got := make(chan runtime.RawRecord, 2)
	if _, err := runtime.Subscribe(reader, "orders", func(_ context.Context, r runtime.RawRecord, _ runtime.Delivery) runtime.Outcome {
		got <- r
		return runtime.Ack()
	}, runtime.CreateIfMissing(1), runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, reader)
	plain, traced := srv.NewBroker(), srv.NewBroker(runtime.WithTracerProvider(tp))
	connect(t, ctx, plain)
	connect(t, ctx, traced)
	if err := runtime.NewPublisher[order](plain, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: 1}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if len(r.Headers) != 0 || string(r.Data) != `{"id":1,"customer":""}` {
		t.Errorf("untraced record: headers %v, data %q; want the plain payload", r.Headers, r.Data)
	}
	if err := runtime.NewPublisher[order](traced, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: 2}); err != nil {
		t.Fatal(err)
	}
	r = <-got
	send := exp.GetSpans()[0]
	want := fmt.Sprintf("00-%s-%s-01", send.SpanContext.TraceID(), send.SpanContext.SpanID())
	if r.Headers["traceparent"] != want || len(r.Headers) != 1 || string(r.Data) != `{"id":2,"customer":""}` {
		t.Errorf("traced record: headers %v, data %q; want traceparent %s", r.Headers, r.Data, want)
	}
}

// PublishAll and StartAll start a producer span per message, each the
// child of the caller's span, and each record carries its own message's
// context; StartAll's spans end when the messages are stored, though
// nobody waits for them.
func TestPublishAllTracesEachMessage(t *testing.T) {
	for _, start := range []bool{false, true} {
		t.Run(fmt.Sprintf("StartAll=%v", start), func(t *testing.T) { testBatchTracesEachMessage(t, start) })
	}
}

func testBatchTracesEachMessage(t *testing.T, start bool) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader, srv := kinesistest.NewBrokerServer()
	got := make(chan runtime.RawRecord, 3)
	if _, err := runtime.Subscribe(reader, "orders", func(_ context.Context, r runtime.RawRecord, _ runtime.Delivery) runtime.Outcome {
		got <- r
		return runtime.Ack()
	}, runtime.CreateIfMissing(1), runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, reader)
	traced := srv.NewBroker(runtime.WithTracerProvider(tp))
	connect(t, ctx, traced)
	rootCtx, root := tp.Tracer("test").Start(ctx, "batch")
	pub := runtime.NewPublisher[order](traced, runtime.PublisherSpec{Stream: "orders"})
	orders := []order{{ID: 1}, {ID: 2}, {ID: 3}}
	if start {
		var msgs []*runtime.Message[order]
		for _, o := range orders {
			msgs = append(msgs, pub.Message(o))
		}
		pd := runtime.StartAll(rootCtx, msgs)
		wait(t, "the send spans ended, no Wait called", func() bool { return len(exp.GetSpans()) == len(orders) })
		if _, err := pd.Wait(); err != nil {
			t.Fatal(err)
		}
	} else if err := runtime.PublishAll(rootCtx, pub, orders); err != nil {
		t.Fatal(err)
	}
	root.End()
	sends := map[string]bool{} // traceparent of each send span
	for _, s := range exp.GetSpans() {
		if s.Name != "send orders" {
			continue
		}
		if s.Parent.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("send span's parent %s, want the caller's %s", s.Parent.SpanID(), root.SpanContext().SpanID())
		}
		sends[fmt.Sprintf("00-%s-%s-01", s.SpanContext.TraceID(), s.SpanContext.SpanID())] = true
	}
	if len(sends) != 3 {
		t.Fatalf("%d send spans, want 3", len(sends))
	}
	for range 3 {
		r := <-got
		if !sends[r.Headers["traceparent"]] {
			t.Errorf("record %s carries traceparent %q, not one of its send spans", r.Data, r.Headers["traceparent"])
		}
		delete(sends, r.Headers["traceparent"])
	}
}
