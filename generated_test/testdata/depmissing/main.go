// Command depmissing uses names of a dependency whose kinesis_gen.go is not
// written yet: those kinesisgen will generate are forgiven, the others not.
package main

import (
	"github.com/kinesisgen/kinesisgen/generated_test/testdata/ok/crosspkg/orders"
	"github.com/kinesisgen/kinesisgen/runtime"
)

func main() {
	b := runtime.NewBroker()
	_ = orders.Mount(b)
	_ = orders.NewOrderPublisher(b)
	var k orders.Key
	_ = k.DecodeHeaders(nil)
	var w orders.Wrapped
	_ = w.DecodeHeaders(nil)
	var _ runtime.HeaderDecoder = &w
	_ = orders.NewRefundPublisher(b)
}
