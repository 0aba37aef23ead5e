package telemetry_test

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// In Lambda mode a handling is traced and counted as in the consumer: a
// process span per invocation's batch, linked to the span each record
// carries, the handler's context carrying its record's, and the handled
// counter by outcome.
func TestLambdaTracesAndMetrics(t *testing.T) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m := newMeter(t)
	srv := kinesistest.New()
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	producer := srv.NewBroker(runtime.WithTracerProvider(tp))
	connect(t, ctx, producer)
	pub := runtime.NewPublisher[order](producer, runtime.PublisherSpec{Stream: "orders"})
	rootCtx, root := tp.Tracer("test").Start(ctx, "checkout")
	for i := range 3 {
		if err := pub.Message(order{ID: i, Customer: "ada"}).PartitionKey("ada").Publish(rootCtx); err != nil {
			t.Fatal(err)
		}
	}
	root.End()

	b := srv.NewBroker(runtime.WithTracerProvider(tp), runtime.WithMeterProvider(m.mp), runtime.WithApplication("shop"))
	parents := make(chan trace.SpanContext, 3)
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		parents <- trace.SpanContextFromContext(ctx)
		if o.ID == 1 {
			return runtime.Reject(nil)
		}
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Drain(ctx, kinesistest.EventSourceMapping{Stream: "orders", Function: kinesislambda.Handler(b), ReportBatchItemFailures: true}); err != nil {
		t.Fatal(err)
	}
	var process []tracetest.SpanStub
	var send tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "process orders":
			process = append(process, s)
		case "send orders":
			send = append(send, s)
		}
	}
	if len(process) != 1 || len(send) != 3 {
		t.Fatalf("%d process spans, %d send spans; want one process span for the invocation", len(process), len(send))
	}
	p := process[0]
	if p.SpanKind != trace.SpanKindConsumer || attrs(p)["messaging.batch.message_count"].AsInt64() != 3 || len(p.Links) != 3 {
		t.Errorf("process span: kind %v, %d links, attributes %v", p.SpanKind, len(p.Links), p.Attributes)
	}
	for _, s := range send {
		if s.SpanContext.TraceID() != root.SpanContext().TraceID() {
			t.Errorf("send span %v not in the caller's trace", s.SpanContext)
		}
		if !slices.ContainsFunc(p.Links, func(l sdktrace.Link) bool { return l.SpanContext.Equal(s.SpanContext.WithRemote(true)) }) {
			t.Errorf("the process span links to no send span %s", s.SpanContext.SpanID())
		}
	}
	close(parents)
	for sc := range parents {
		if !sc.IsRemote() || !slices.ContainsFunc(send, func(s tracetest.SpanStub) bool { return s.SpanContext.SpanID() == sc.SpanID() }) {
			t.Errorf("a handler's context carries span %v, not its record's send span", sc)
		}
	}
	got := m.collect()
	if h := values(got["kinesisgen.handler.messages"]); h != "kinesisgen.handler=,kinesisgen.outcome=ack,messaging.destination.name=orders: 2\nkinesisgen.handler=,kinesisgen.outcome=reject,messaging.destination.name=orders: 1" {
		t.Errorf("handler messages %s", h)
	}
	if d := values(got["kinesisgen.handler.duration"]); d != "kinesisgen.handler=,messaging.destination.name=orders: 3" {
		t.Errorf("handler durations %s", d)
	}
}
