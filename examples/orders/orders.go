// Package main is the order service of the shards-keys-ordering guide, with
// the shipments of the keys guide: orders are posted to each customer's
// journal in order, every journal entry is confirmed with a receipt, and
// every receipt ships, keyed by customer through a header contract.
//
// customer-orders --Post--> customer-orders.journal --Confirm--> receipts --Ship--> shipments --Deliver
//
// An order that does not decode (a client of an older schema) is rejected
// by Post to customer-orders.dead-letters, where Inspect reads it raw.
package main

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

import (
	"context"
	"fmt"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Order is what the shop publishes, keyed by customer.
//
//kinesis:message stream=customer-orders
type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

// Entry is one line of a customer's journal.
//
//kinesis:message stream=customer-orders.journal
type Entry struct {
	Order    int    `json:"order"`
	Customer string `json:"customer"`
}

// Receipt confirms a journal entry. A reply goes under the key of the record
// it answers, so each customer's receipts keep the order of their entries.
//
//kinesis:message stream=receipts
type Receipt struct {
	Order    int    `json:"order"`
	Customer string `json:"customer"`
}

// ShipmentKey is the header contract of a shipment: its customer becomes the
// record's partition key, so the warehouse reads each customer's shipments in order.
type ShipmentKey struct {
	Customer string `kinesis:"partition-key"`
}

// Shipment leaves the warehouse once its order is confirmed.
//
//kinesis:message stream=shipments headers=ShipmentKey
type Shipment struct {
	Order int `json:"order"`
}

// Service holds the handlers; the book records what they did.
type Service struct {
	book *Book
}

// Post writes each order to the journal under the customer as partition key.
// Four lanes by key: four orders at once, never two of one customer. A
// record that is not an Order goes to the dead-letter stream.
//
//kinesis:subscriber stream=customer-orders create_if_missing=2 workers=4 by_key dead_letter=customer-orders.dead-letters
func (s *Service) Post(ctx context.Context, order Order, journal runtime.Publisher[Entry]) runtime.Outcome {
	entry := Entry{Order: order.ID, Customer: order.Customer}
	if err := journal.Message(entry).PartitionKey(order.Customer).Publish(ctx); err != nil {
		return runtime.Retry()
	}
	s.book.posted(entry)
	return runtime.Ack()
}

// Confirm replies to each journal entry with a receipt, under the entry's
// key (its customer): no key is named, so the reply inherits it.
//
//kinesis:subscriber stream=customer-orders.journal create_if_missing=1 reply
func (s *Service) Confirm(ctx context.Context, entry Entry) Receipt {
	return Receipt(entry)
}

// Ship sends a shipment for each receipt. The body names the key only
// through the header contract, the portable spelling every broker reads.
//
//kinesis:subscriber stream=receipts create_if_missing=1
func (s *Service) Ship(ctx context.Context, receipt Receipt, shipments runtime.Publisher[Shipment]) error {
	s.book.receipted(receipt)
	return shipments.Message(Shipment{Order: receipt.Order}).
		Headers(ShipmentKey{Customer: receipt.Customer}).
		Publish(ctx)
}

// Deliver is the warehouse: it reads the key back from the header contract.
//
//kinesis:subscriber stream=shipments create_if_missing=2 workers=2 by_key
func (s *Service) Deliver(ctx context.Context, shipment Shipment, key ShipmentKey, d runtime.Delivery) runtime.Outcome {
	if key.Customer != d.PartitionKey {
		return runtime.Reject(fmt.Errorf("shipment %d: header key %q differs from partition key %q", shipment.Order, key.Customer, d.PartitionKey))
	}
	s.book.shipped(key.Customer, shipment)
	return runtime.Ack()
}

// Inspect reads the dead-letter stream. Its records did not decode as
// orders, so it takes them raw: bytes, key, headers and where they came from.
//
//kinesis:subscriber stream=customer-orders.dead-letters create_if_missing=1
func (s *Service) Inspect(ctx context.Context, rec runtime.RawRecord) error {
	dl, _ := rec.DeadLetter()
	s.book.deadLettered(fmt.Sprintf("key=%s data=%s from=%s reason=%q", rec.PartitionKey, rec.Data, dl.Stream, dl.Reason))
	return nil
}
