// Package shapes has one handler of every shape kinesisgen accepts: each
// records its call on Calls so that tests can see what it was given.
package shapes

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

import (
	"context"
	"errors"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Call is what a handler was given.
type Call struct {
	Handler  string
	Msg      any
	Headers  any
	Delivery *runtime.Delivery
}

// Calls receives one Call per handler invocation.
var Calls = make(chan Call, 1000)

// ErrFail makes a handler returning error fail.
var ErrFail = errors.New("shapes: asked to fail")

// Order is a message; OnOutcome returns an outcome.
//
//kinesis:message stream=shapes.orders
type Order struct {
	ID       int
	Customer string
	Fail     bool
}

// Audit is a plain struct without a marker: a handler may still read it.
type Audit struct{ Line string }

// Shipment carries the ShipmentKey header contract.
//
//kinesis:message stream=shapes.shipments headers=ShipmentKey
type Shipment struct{ Order int }

// ShipmentKey names the customer as the record's partition key.
type ShipmentKey struct {
	Customer string `kinesis:"partition-key"`
	Priority int    `kinesis:"priority"`
}

// Payment is published by tests; OnPayment publishes an Entry and an Alert.
//
//kinesis:message stream=shapes.payments
type Payment struct{ Amount int }

// Entry is a journal line.
//
//kinesis:message stream=shapes.journal
type Entry struct {
	Order    int
	Customer string
}

// Alert is published by OnPayment for large payments.
//
//kinesis:message stream=shapes.alerts partition_key=alerts
type Alert struct{ Amount int }

// Refund is handled with its delivery.
//
//kinesis:message stream=shapes.refunds
type Refund struct{ Order int }

// Return is handled with every optional parameter at once.
//
//kinesis:message stream=shapes.returns headers=ShipmentKey
type Return struct{ Order int }

// Receipt is the reply of Confirm and Ledger.Settle.
//
//kinesis:message stream=shapes.receipts
type Receipt struct{ Order int }

// Invoice is settled by a method with a (reply, error) result.
//
//kinesis:message stream=shapes.invoices
type Invoice struct {
	Order int
	Fail  bool
}

// Tick is handled by a method with a value receiver.
//
//kinesis:message stream=shapes.ticks
type Tick struct{ N int }

// OnOutcome: func(ctx, msg) runtime.Outcome.
//
//kinesis:subscriber stream=shapes.orders start_at=horizon
func OnOutcome(ctx context.Context, msg Order) runtime.Outcome {
	Calls <- Call{Handler: "OnOutcome", Msg: msg}
	if msg.Fail {
		return runtime.Reject(ErrFail)
	}
	return runtime.Ack()
}

// OnError: func(ctx, msg) error, on a type without a message marker.
//
//kinesis:subscriber stream=shapes.audit create_if_missing=1 start_at=horizon
func OnError(ctx context.Context, msg Audit) error {
	Calls <- Call{Handler: "OnError", Msg: msg}
	return nil
}

// OnHeaders: func(ctx, msg, headers) error.
//
//kinesis:subscriber stream=shapes.shipments start_at=horizon
func OnHeaders(ctx context.Context, msg Shipment, key ShipmentKey) error {
	Calls <- Call{Handler: "OnHeaders", Msg: msg, Headers: key}
	return nil
}

// OnPayment: func(ctx, msg, out, out) runtime.Outcome.
//
//kinesis:subscriber stream=shapes.payments start_at=horizon
func OnPayment(ctx context.Context, msg Payment, journal runtime.Publisher[Entry], alerts runtime.Publisher[Alert]) runtime.Outcome {
	Calls <- Call{Handler: "OnPayment", Msg: msg}
	if err := journal.Message(Entry{Order: msg.Amount}).PartitionKey("payments").Publish(ctx); err != nil {
		return runtime.Retry()
	}
	if msg.Amount >= 1000 {
		if err := alerts.Publish(ctx, Alert(msg)); err != nil {
			return runtime.Retry()
		}
	}
	return runtime.Ack()
}

// OnRaw: func(ctx, runtime.RawRecord, d) error, on a stream whose records no
// codec reads: every record is handed over undecoded, as a dead-letter reader
// takes them.
//
//kinesis:subscriber stream=shapes.raw create_if_missing=1 start_at=horizon
func OnRaw(ctx context.Context, rec runtime.RawRecord, d runtime.Delivery) error {
	Calls <- Call{Handler: "OnRaw", Msg: string(rec.Data), Headers: rec.Headers, Delivery: &d}
	return nil
}

// OnRefund: func(ctx, msg, d) runtime.Outcome.
//
//kinesis:subscriber stream=shapes.refunds start_at=horizon
func OnRefund(ctx context.Context, msg Refund, d runtime.Delivery) runtime.Outcome {
	Calls <- Call{Handler: "OnRefund", Msg: msg, Delivery: &d}
	return runtime.Ack()
}

// OnReturn: func(ctx, msg, headers, out, d) error.
//
//kinesis:subscriber stream=shapes.returns start_at=horizon
func OnReturn(ctx context.Context, msg Return, key ShipmentKey, journal runtime.Publisher[Entry], d runtime.Delivery) error {
	Calls <- Call{Handler: "OnReturn", Msg: msg, Headers: key, Delivery: &d}
	return journal.Message(Entry{Order: msg.Order, Customer: key.Customer}).Headers(key).Publish(ctx)
}

// Confirm: func(ctx, msg) Y, replies keyed at the mount site.
//
//kinesis:subscriber stream=shapes.journal start_at=horizon reply partition_key=receipts
func Confirm(ctx context.Context, msg Entry) Receipt {
	Calls <- Call{Handler: "Confirm", Msg: msg}
	return Receipt{Order: msg.Order}
}

// Ledger settles invoices.
type Ledger struct{ Settled chan Invoice }

// Settle: a method func(ctx, msg) (Y, error).
//
//kinesis:subscriber stream=shapes.invoices start_at=horizon reply
func (l *Ledger) Settle(ctx context.Context, msg Invoice) (Receipt, error) {
	Calls <- Call{Handler: "Ledger.Settle", Msg: msg}
	if msg.Fail {
		return Receipt{}, ErrFail
	}
	l.Settled <- msg
	return Receipt{Order: msg.Order}, nil
}

// Clock counts ticks.
type Clock struct{ Name string }

// Tick: a method with a value receiver.
//
//kinesis:subscriber stream=shapes.ticks start_at=horizon
func (c Clock) Tick(ctx context.Context, msg Tick, d runtime.Delivery) runtime.Outcome {
	Calls <- Call{Handler: c.Name + ".Tick", Msg: msg, Delivery: &d}
	return runtime.Ack()
}
