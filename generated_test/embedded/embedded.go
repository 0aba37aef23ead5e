// Package embedded has a header contract that embeds others, by value and
// by pointer: their tagged fields are headers of the embedding contract.
package embedded

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Base carries the tenant; embedded by value.
type Base struct {
	Tenant string `kinesis:"tenant"`
}

// Trace is embedded by pointer: nil sends none of its headers.
type Trace struct {
	ID   string `kinesis:"trace-id"`
	Hops int    `kinesis:"hops"`
	*Span
}

// Span is embedded two levels down, by pointer.
type Span struct {
	Name string `kinesis:"span"`
}

// Hdr is the header contract of Order.
type Hdr struct {
	Base
	*Trace
	Customer string `kinesis:"partition-key"`
}

// Order carries Hdr.
//
//kinesis:message stream=embedded.orders headers=Hdr
type Order struct{ ID int }

// Received gets each order's headers.
var Received = make(chan Hdr, 10)

// Receive hands the decoded headers to Received.
//
//kinesis:subscriber stream=embedded.orders start_at=horizon
func Receive(ctx context.Context, msg Order, h Hdr) runtime.Outcome {
	Received <- h
	return runtime.Ack()
}
