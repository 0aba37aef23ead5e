package billing

import (
	"context"

	"github.com/kinesisgen/kinesisgen/generated_test/testdata/diag/cross_package_streams/orders"
)

// Charge reads orders.Placed from the wrong stream.
//
//kinesis:subscriber stream=orders.created
func Charge(ctx context.Context, msg orders.Placed) error { return nil }

// Invoice is a second type on orders' stream.
//
//kinesis:message stream=orders.placed
type Invoice struct{ ID int }
