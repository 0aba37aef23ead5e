package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

//kinesis:message stream=journal
type Entry struct{}

type Order struct{}

//kinesis:subscriber stream=orders
func Handle(ctx context.Context, msg Order, d runtime.Delivery, out runtime.Publisher[Entry]) error {
	return nil
}
