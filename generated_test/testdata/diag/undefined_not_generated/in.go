package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

type Order struct{}

// Start uses a generated name this package will not get: it has no message Payment.
func Start() { _ = NewPaymentPublisher }
