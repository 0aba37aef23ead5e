package shapes_test

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/generated_test/shapes"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// seen is a record observed on a stream the package publishes to.
type seen[T any] struct {
	msg T
	d   runtime.Delivery
}

// harness runs the generated Mount on the in-process backend, with observers
// on the streams that only the handlers publish to.
type harness struct {
	t        *testing.T
	ctx      context.Context
	b        *runtime.Broker
	srv      *kinesistest.Server
	ledger   *shapes.Ledger
	pending  []shapes.Call
	receipts chan seen[shapes.Receipt]
	alerts   chan seen[shapes.Alert]
}

func start(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b, srv := kinesistest.NewBrokerServer()
	// Every stream but shapes.audit, which its subscriber creates if missing.
	for _, s := range []string{"shapes.orders", "shapes.shipments", "shapes.payments", "shapes.journal", "shapes.alerts",
		"shapes.refunds", "shapes.returns", "shapes.receipts", "shapes.invoices", "shapes.ticks"} {
		if err := srv.AddStream(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, ctx: ctx, b: b, srv: srv, ledger: &shapes.Ledger{Settled: make(chan shapes.Invoice, 10)},
		receipts: make(chan seen[shapes.Receipt], 10), alerts: make(chan seen[shapes.Alert], 10)}
	if err := shapes.Mount(b, &shapes.Clock{Name: "clock1"}, h.ledger); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	observe(t, b, "shapes.receipts", h.receipts)
	observe(t, b, "shapes.alerts", h.alerts)
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return h
}

func observe[T any](t *testing.T, b *runtime.Broker, stream string, ch chan seen[T]) {
	t.Helper()
	_, err := runtime.Subscribe(b, stream, func(ctx context.Context, msg T, d runtime.Delivery) runtime.Outcome {
		ch <- seen[T]{msg, d}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	if err != nil {
		t.Fatal(err)
	}
}

// call waits for the next call of handler; calls of other handlers are kept.
func (h *harness) call(handler string) shapes.Call {
	h.t.Helper()
	for i, c := range h.pending {
		if c.Handler == handler {
			h.pending = append(h.pending[:i], h.pending[i+1:]...)
			return c
		}
	}
	for {
		select {
		case c := <-shapes.Calls:
			if c.Handler == handler {
				return c
			}
			h.pending = append(h.pending, c)
		case <-h.ctx.Done():
			h.t.Fatalf("%s was not called; other calls: %+v", handler, h.pending)
		}
	}
}

func next[T any](h *harness, ch chan seen[T], what string) seen[T] {
	h.t.Helper()
	select {
	case s := <-ch:
		return s
	case <-h.ctx.Done():
		h.t.Fatalf("no %s", what)
	}
	panic("unreachable")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestShapes(t *testing.T) {
	h := start(t)
	ctx := h.ctx

	t.Run("outcome", func(t *testing.T) {
		must(t, shapes.NewOrderPublisher(h.b).Publish(ctx, shapes.Order{ID: 1, Customer: "ann"}))
		if c := h.call("OnOutcome"); c.Msg != (shapes.Order{ID: 1, Customer: "ann"}) {
			t.Errorf("OnOutcome got %+v", c.Msg)
		}
	})

	t.Run("error result on an unmarked type, stream created if missing", func(t *testing.T) {
		audit := runtime.NewPublisher[shapes.Audit](h.b, runtime.PublisherSpec{Stream: "shapes.audit"})
		must(t, audit.Publish(ctx, shapes.Audit{Line: "x"}))
		if c := h.call("OnError"); c.Msg != (shapes.Audit{Line: "x"}) {
			t.Errorf("OnError got %+v", c.Msg)
		}
	})

	t.Run("headers decoded, partition-key header keys the record", func(t *testing.T) {
		key := shapes.ShipmentKey{Customer: "bob", Priority: 2}
		must(t, shapes.NewShipmentPublisher(h.b).Message(shapes.Shipment{Order: 7}).Headers(key).Publish(ctx))
		c := h.call("OnHeaders")
		if c.Msg != (shapes.Shipment{Order: 7}) || c.Headers != key {
			t.Errorf("OnHeaders got %+v with headers %+v, want headers %+v", c.Msg, c.Headers, key)
		}
		recs, err := h.srv.Records("shapes.shipments")
		must(t, err)
		if len(recs) != 1 || *recs[0].PartitionKey != "bob" {
			t.Errorf("shipment records %+v, want one keyed bob", recs)
		}
	})

	t.Run("malformed header rejects without calling the handler", func(t *testing.T) {
		pub := shapes.NewShipmentPublisher(h.b)
		must(t, pub.Message(shapes.Shipment{Order: 8}).Header("priority", "high").Publish(ctx))
		must(t, pub.Message(shapes.Shipment{Order: 9}).Publish(ctx))
		// One shard, read in order: the bad record was settled before this one.
		if c := h.call("OnHeaders"); c.Msg != (shapes.Shipment{Order: 9}) {
			t.Errorf("OnHeaders got %+v, want order 9 (order 8 has a malformed priority)", c.Msg)
		}
	})

	t.Run("injected publishers publish", func(t *testing.T) {
		must(t, shapes.NewPaymentPublisher(h.b).Publish(ctx, shapes.Payment{Amount: 1500}))
		h.call("OnPayment")
		alert := next(h, h.alerts, "alert")
		if alert.msg.Amount != 1500 || alert.d.PartitionKey != "alerts" {
			t.Errorf("alert %+v keyed %q, want 1500 keyed alerts (the message marker's partition_key)", alert.msg, alert.d.PartitionKey)
		}
		// The journal entry reaches Confirm, whose reply is keyed at the mount site.
		if c := h.call("Confirm"); c.Msg != (shapes.Entry{Order: 1500}) {
			t.Errorf("Confirm got %+v", c.Msg)
		}
		r := next(h, h.receipts, "receipt")
		if r.msg.Order != 1500 || r.d.PartitionKey != "receipts" || r.d.Stream != "shapes.receipts" {
			t.Errorf("receipt %+v on %s keyed %q; want order 1500 on shapes.receipts keyed receipts", r.msg, r.d.Stream, r.d.PartitionKey)
		}
		recs, err := h.srv.Records("shapes.journal")
		must(t, err)
		if len(recs) != 1 || *recs[0].PartitionKey != "payments" {
			t.Errorf("journal records %+v, want one keyed payments (the publish step)", recs)
		}
	})

	t.Run("delivery", func(t *testing.T) {
		must(t, shapes.NewRefundPublisher(h.b).Message(shapes.Refund{Order: 3}).PartitionKey("k3").Publish(ctx))
		c := h.call("OnRefund")
		recs, err := h.srv.Records("shapes.refunds")
		must(t, err)
		d := c.Delivery
		if d == nil || len(recs) != 1 {
			t.Fatalf("delivery %+v, records %+v", d, recs)
		}
		if d.Stream != "shapes.refunds" || d.PartitionKey != "k3" || d.ShardID != recs[0].ShardID ||
			d.SequenceNumber != *recs[0].SequenceNumber || d.Attempt != 1 || d.Headers()[runtime.PartitionKeyHeader] != "k3" {
			t.Errorf("delivery %+v, want the record %s/%s keyed k3, attempt 1", d, recs[0].ShardID, *recs[0].SequenceNumber)
		}
	})

	t.Run("every parameter at once", func(t *testing.T) {
		key := shapes.ShipmentKey{Customer: "cid", Priority: 5}
		must(t, shapes.NewReturnPublisher(h.b).Message(shapes.Return{Order: 4}).Headers(key).Publish(ctx))
		c := h.call("OnReturn")
		if c.Msg != (shapes.Return{Order: 4}) || c.Headers != key || c.Delivery == nil || c.Delivery.PartitionKey != "cid" {
			t.Errorf("OnReturn got %+v", c)
		}
		if c := h.call("Confirm"); c.Msg != (shapes.Entry{Order: 4, Customer: "cid"}) {
			t.Errorf("Confirm got %+v", c.Msg)
		}
		if r := next(h, h.receipts, "receipt"); r.msg.Order != 4 || r.d.PartitionKey != "receipts" {
			t.Errorf("receipt %+v keyed %q", r.msg, r.d.PartitionKey)
		}
	})

	t.Run("method with (reply, error)", func(t *testing.T) {
		pub := shapes.NewInvoicePublisher(h.b)
		must(t, pub.Publish(ctx, shapes.Invoice{Order: 11, Fail: true}))
		must(t, pub.Message(shapes.Invoice{Order: 12}).PartitionKey("inv-12").Publish(ctx))
		if got := <-h.ledger.Settled; got.Order != 12 {
			t.Errorf("settled %+v, want order 12", got)
		}
		// Only the successful invoice replies; without partition_key the
		// reply goes under the key of the invoice it answers.
		r := next(h, h.receipts, "receipt")
		if r.msg.Order != 12 || r.d.PartitionKey != "inv-12" {
			t.Errorf("receipt %+v keyed %q, want order 12 under the invoice's key inv-12", r.msg, r.d.PartitionKey)
		}
	})

	t.Run("raw record: bytes no codec reads, with key and headers", func(t *testing.T) {
		data := []byte("not json {")
		_, err := h.srv.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("shapes.raw"), PartitionKey: aws.String("r1"), Data: data})
		must(t, err)
		c := h.call("OnRaw")
		if c.Msg != string(data) || c.Delivery == nil || c.Delivery.PartitionKey != "r1" {
			t.Errorf("OnRaw got %+v, want %q keyed r1", c, data)
		}
		raw := runtime.NewPublisher[shapes.Audit](h.b, runtime.PublisherSpec{Stream: "shapes.raw"})
		must(t, raw.Message(shapes.Audit{Line: "y"}).PartitionKey("r2").Header("trace", "t9").Publish(ctx))
		c = h.call("OnRaw")
		if c.Msg != `{"Line":"y"}` || c.Headers.(runtime.Headers)["trace"] != "t9" {
			t.Errorf("OnRaw got %+v, want the JSON payload and its trace header", c)
		}
	})

	t.Run("method with a value receiver", func(t *testing.T) {
		must(t, shapes.NewTickPublisher(h.b).Publish(ctx, shapes.Tick{N: 1}))
		if c := h.call("clock1.Tick"); c.Msg != (shapes.Tick{N: 1}) || c.Delivery == nil {
			t.Errorf("Tick got %+v", c)
		}
	})
}

func TestMountNilReceiver(t *testing.T) {
	err := shapes.Mount(kinesistest.NewBroker(), nil, &shapes.Ledger{})
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("Mount(nil receiver) = %v, want ErrInvalid", err)
	}
}

func TestMountReportsEveryHandler(t *testing.T) {
	// A broker already reading shapes.orders refuses a second subscription:
	// Mount names the handler in the error.
	b := kinesistest.NewBroker()
	_, err := runtime.Subscribe(b, "shapes.orders", func(context.Context, json.RawMessage, runtime.Delivery) runtime.Outcome { return runtime.Ack() })
	must(t, err)
	err = shapes.Mount(b, &shapes.Clock{}, &shapes.Ledger{})
	if err == nil || !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("Mount = %v, want ErrInvalid naming shapes.OnOutcome", err)
	}
	if want := "shapes.OnOutcome: "; !strings.Contains(err.Error(), want) {
		t.Errorf("Mount error %q does not name the handler (%q)", err, want)
	}
}
