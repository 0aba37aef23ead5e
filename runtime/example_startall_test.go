package runtime_test

import (
	"context"
	"fmt"
	"log"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// A bulk producer keeps one batch on its way while it builds the next, as
// a KPL producer adds records while earlier ones are in flight. Each
// customer's orders keep their order across the batches.
func ExampleStartAll() {
	ctx := context.Background()
	backend := kinesistest.New() // the in-process backend; NewBroker's defaults reach AWS
	if err := backend.AddStream("orders", 2); err != nil {
		log.Fatal(err)
	}
	b := runtime.NewBroker(runtime.WithKinesisClient(backend))
	if err := b.Connect(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown(ctx)

	type order struct{ ID, Customer int }
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"},
		runtime.WithAggregation(runtime.Aggregation{}))
	stored := 0
	wait := func(pd *runtime.Pending) {
		receipts, err := pd.Wait()
		if err != nil {
			log.Fatal(err) // the errors of the messages that failed, joined
		}
		stored += len(receipts)
	}
	var onItsWay *runtime.Pending
	for batch := range 4 {
		msgs := make([]*runtime.Message[order], 0, 100)
		for i := range 100 {
			o := order{ID: batch*100 + i, Customer: i % 10}
			msgs = append(msgs, p.Message(o).PartitionKey(fmt.Sprint("customer-", o.Customer)))
		}
		next := runtime.StartAll(ctx, msgs)
		if onItsWay != nil {
			wait(onItsWay)
		}
		onItsWay = next
	}
	wait(onItsWay)
	fmt.Println("stored", stored, "orders")
	// Output: stored 400 orders
}
