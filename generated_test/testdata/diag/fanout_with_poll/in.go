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

//kinesis:subscriber stream=orders fanout=orders-app poll=500ms
func Handle(ctx context.Context, msg Order) error { return nil }
