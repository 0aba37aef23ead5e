package p

import (
	"context"

	"github.com/kinesisgen/kinesisgen/runtime"
)

var (
	_ runtime.Outcome
	_ context.Context
)

//kinesis:message stream=orders headers=OrderHeaders
type Order struct{}
