package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Issue 29, defect 5: a handler's context is cancelled when the lease of
// its record's shard is lost, since the shard's next owner may handle the
// record meanwhile; its outcome then counts for nothing (no retry copy).
// (Before the fix the context ended only when the subscription stopped:
// the handler ran on beside the next owner.)
func TestHandlerContextEndsWhenItsLeaseIsLost(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	b := e.broker(runtime.WithOwnerID("a"))
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	mustSubscribe(e, b, orders, func(ctx context.Context, _ order, _ runtime.Delivery) runtime.Outcome {
		select {
		case started <- struct{}{}:
		default:
			return runtime.Ack()
		}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return runtime.Retry()
		case <-time.After(10 * time.Second):
			ended <- nil
			return runtime.Ack()
		}
	})
	e.connect(b)
	waitStatus(e, b, orders, "a reading its shard", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 1 && s.Shards[0].Lease == runtime.LeaseReading
	})
	e.putOrders(orders, 0, 1, 1)
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler never ran")
	}
	ls := e.leases(orders)
	if _, err := e.store.Take(e.ctx, ls[0], "thief"); err != nil {
		t.Fatal(err)
	}
	waitStatus(e, b, orders, "the lease lost", func(st runtime.Status, _ runtime.SubscriptionStatus) bool {
		return st.Leases.Lost == 1
	})
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the handler's context never ended after its lease was lost")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the handler's context still live 2 s after its lease was lost")
	}
	time.Sleep(200 * time.Millisecond) // the outcome carried out, if it were
	if _, sub := waitStatus(e, b, orders, "a status", func(runtime.Status, runtime.SubscriptionStatus) bool { return true }); sub.Outcomes.Retried != 0 {
		t.Errorf("%d retry copies of a handling whose lease was lost", sub.Outcomes.Retried)
	}
}
