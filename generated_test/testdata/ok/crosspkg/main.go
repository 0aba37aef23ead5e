// Command crosspkg uses what kinesisgen will generate for another package
// of the same run.
package main

import (
	"github.com/kinesisgen/kinesisgen/generated_test/testdata/ok/crosspkg/orders"
	"github.com/kinesisgen/kinesisgen/runtime"
)

// Ping makes this package one kinesisgen loads under ./... too.
//
//kinesis:message stream=crosspkg.pings
type Ping struct{}

func main() {
	b := runtime.NewBroker()
	_ = orders.Mount(b)
	_ = orders.NewOrderPublisher(b)
	var k orders.Key
	_ = k.DecodeHeaders(nil)
	var w orders.Wrapped
	_ = w.DecodeHeaders(nil)
	var _ runtime.HeaderDecoder = &w
	var _ runtime.HeaderEncoder = k
}
