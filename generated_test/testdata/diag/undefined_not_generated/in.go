package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

// Order is a message: this package gets NewOrderPublisher.
//
//kinesis:message stream=orders
type Order struct{}

// Start uses a generated name this package will not get: it has no message Payment.
func Start() { _ = NewPaymentPublisher }
