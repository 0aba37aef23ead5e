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

//kinesis:subscriber stream=orders queue=work workers=4 by_key
func Handle(ctx context.Context, msg Order) error { return nil }
