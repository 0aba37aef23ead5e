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

//kinesis:subscriber stream=orders queue=work fanout=orders-app
func Handle(ctx context.Context, msg Order) error { return nil }
