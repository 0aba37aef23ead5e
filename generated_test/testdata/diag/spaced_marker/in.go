package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

// Order is an order.
//
// kinesis:message stream=orders
type Order struct{}
