package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

//kinesis:message stream=orders headers=OrderKey
type Order struct{}

type OrderKey struct {
	Customer string `kinesis:"partition-key"`
}

type OtherKey struct {
	Account string `kinesis:"account"`
}

//kinesis:subscriber stream=orders
func Handle(ctx context.Context, msg Order, h OtherKey) error { return nil }
