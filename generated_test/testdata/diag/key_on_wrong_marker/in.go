package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

//kinesis:message stream=orders fanout=orders-app
type Order struct{}

//kinesis:subscriber stream=orders aggregate
func Handle(ctx context.Context, msg Order) error { return nil }
