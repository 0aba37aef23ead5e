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

//kinesis:message stream=receipts
type Receipt struct{}

//kinesis:subscriber stream=orders
func Handle(ctx context.Context, msg Order) Receipt { return Receipt{} }
