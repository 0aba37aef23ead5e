package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// A queue subscriber's handling is traced as a shard subscriber's is: a
// batch process span links to the publish's send span, and the handler's
// context carries the send span's context (remote), so that what the
// handler starts or publishes continues the producer's trace.
func TestQueueSubscriberTraced(t *testing.T) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := kinesistest.NewBroker(runtime.WithTracerProvider(tp), runtime.WithApplication("shop"))
	seen := make(chan trace.SpanContext, 1)
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- trace.SpanContextFromContext(ctx)
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work")); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, b)
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"})
	if err := pub.Message(order{ID: 1, Customer: "ada"}).PartitionKey("ada").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	var handlerSpan trace.SpanContext
	select {
	case handlerSpan = <-seen:
	case <-ctx.Done():
		t.Fatal("not handled")
	}
	var send, process tracetest.SpanStub
	for deadline := time.Now().Add(5 * time.Second); process.Name == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "send orders":
				send = s
			case "process orders":
				process = s
			}
		}
	}
	if process.Name == "" || send.Name == "" {
		t.Fatalf("spans %v", exp.GetSpans())
	}
	if len(process.Links) != 1 || !process.Links[0].SpanContext.Equal(send.SpanContext.WithRemote(true)) {
		t.Errorf("process span links to %v, want the send span %s", process.Links, send.SpanContext.SpanID())
	}
	a := attrs(process)
	if process.SpanKind != trace.SpanKindConsumer || process.Parent.IsValid() || a["messaging.batch.message_count"].AsInt64() != 1 ||
		a["messaging.consumer.group.name"].AsString() != "shop" || a["messaging.operation.type"].AsString() != "process" {
		t.Errorf("process span: kind %v, parent %v, attributes %v", process.SpanKind, process.Parent, process.Attributes)
	}
	if handlerSpan.SpanID() != send.SpanContext.SpanID() || !handlerSpan.IsRemote() {
		t.Errorf("the handler's context carries span %s, not its record's producer span %s", handlerSpan.SpanID(), send.SpanContext.SpanID())
	}
}
