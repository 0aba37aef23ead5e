package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// A queue subscriber's handling is traced as a shard subscriber's is: its
// process span is the child of the publish's send span, and carries the
// queue record's id as the message id.
func TestQueueSubscriberTraced(t *testing.T) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := kinesistest.NewBroker(runtime.WithTracerProvider(tp), runtime.WithApplication("shop"))
	seen := make(chan runtime.Delivery, 1)
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work")); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, b)
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"})
	if err := pub.Message(order{ID: 1, Customer: "ada"}).PartitionKey("ada").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	var d runtime.Delivery
	select {
	case d = <-seen:
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
	if process.Parent.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("process span's parent %s, want the send span %s", process.Parent.SpanID(), send.SpanContext.SpanID())
	}
	if got := attrs(process)["messaging.message.id"].AsString(); got != d.RecordID || got == "" {
		t.Errorf("message id %q, want the record id %q", got, d.RecordID)
	}
}
