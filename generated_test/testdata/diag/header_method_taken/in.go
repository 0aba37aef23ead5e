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
	Customer string `kinesis:"partition-key"`
}

// EncodeHeaders is the user's own.
func (k Key) EncodeHeaders(h runtime.Headers) {}
