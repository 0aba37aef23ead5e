package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Issue 9, "also seen": a shutdown that runs out of time with records still
// unsettled says which subscription, which shards and how many records
// were left (they are read again by the shards' next owner).
func TestShutdownThatRunsOutOfTimeNamesWhatWasLeft(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 2)
	pub := e.publisher(orders)
	perShard := map[string]int{}
	for i := range 40 {
		key := fmt.Sprintf("customer-%d", i)
		r, err := pub.Message(order{ID: i, Customer: key}).PartitionKey(key).Send(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		perShard[r.ShardID]++
	}
	if len(perShard) != 2 {
		t.Fatalf("records on shards %v, want both", perShard)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	entered := make(chan struct{}, 40)
	b := e.broker(runtime.WithShutdownTimeout(300 * time.Millisecond))
	mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		entered <- struct{}{}
		<-stuck // ignores its context: nothing settles
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Workers(40), runtime.HandlerName("orders.Post"))
	e.connect(b)
	receive(e, entered, 40) // every record is handed out, none settles

	err := b.Shutdown(e.ctx)
	if err == nil {
		t.Fatal("Shutdown with every record stuck returned nil")
	}
	msg := err.Error()
	t.Logf("Shutdown: %v", err)
	for _, want := range []string{orders, "orders.Post", "40 records not settled"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Shutdown error %q does not name %q", msg, want)
		}
	}
	for shardID, n := range perShard {
		if want := fmt.Sprintf("%s: %d", shardID, n); !strings.Contains(msg, want) {
			t.Errorf("Shutdown error %q does not name %q", msg, want)
		}
	}
}
