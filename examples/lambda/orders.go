// Command lambda is the Lambda function of an order service: the same
// //kinesis:subscriber handlers a long-running consumer mounts, run by an
// event source mapping on the stream "orders" (see docs/lambda.md). Its
// test runs it against kinesistest's mapping stand-in.
package main

import (
	"context"
	"fmt"

	"github.com/kinesisgen/kinesisgen/runtime"
)

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

// Order is what the shop publishes, keyed by customer.
//
//kinesis:message stream=orders
type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`
}

// Receipt answers an order, under the order's key: each customer's
// receipts keep the order of their orders.
//
//kinesis:message stream=order-receipts
type Receipt struct {
	Order    int    `json:"order"`
	Customer string `json:"customer"`
}

// Service holds the handlers' dependencies.
type Service struct{}

// Post answers each order with a receipt. Eight lanes by key: eight orders
// at once, never two of one customer, each customer's in order. An order
// that does not decode, or that is invalid, goes to the dead-letter stream
// with why; a receipt that cannot be published is retried (a copy of the
// order at the stream's tip), three times at most, then dead-lettered.
//
//kinesis:subscriber stream=orders workers=8 by_key retries=3 dead_letter=orders.dead-letters
func (s *Service) Post(ctx context.Context, o Order, receipts runtime.Publisher[Receipt]) runtime.Outcome {
	if o.Amount <= 0 {
		return runtime.Reject(fmt.Errorf("order %d: amount %d is not positive", o.ID, o.Amount))
	}
	// The receipt goes under the order's key (the record being handled):
	// it is stored before the invocation returns.
	return runtime.ReplyOutcome(ctx, receipts, Receipt{Order: o.ID, Customer: o.Customer}, nil)
}
