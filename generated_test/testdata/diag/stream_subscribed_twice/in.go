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

//kinesis:subscriber stream=orders
func Handle(ctx context.Context, msg Order) error { return nil }

//kinesis:subscriber stream=orders
func Again(ctx context.Context, msg Order) error { return nil }
