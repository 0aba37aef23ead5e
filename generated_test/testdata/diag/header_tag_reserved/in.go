package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

type Key struct {
	Customer string `kinesis:"kinesisgen-attempt"`
}
