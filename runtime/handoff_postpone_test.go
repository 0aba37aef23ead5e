package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// A broker joins while the other's handlers run records for longer than a
// handoff waits for them (half the handoff time, here 1 s): the handoff
// is postponed, never cut short, so no order is handled by two brokers at
// once or twice, and each customer's orders are handled in publish order.
// The giver's Status counts the postponement. (Before issue 29 the giver
// released the shard after 1 s and the joiner handled the orders still
// running on the giver a second time, beside them.)
func TestJoinDuringSlowHandlersHandlesNoOrderTwice(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 2)
	const slow = 3 * time.Second
	var mu sync.Mutex
	running := map[int]string{} // order id -> the broker handling it
	handled := map[int]int{}
	lastOf := map[string]int{} // customer -> last order id handled
	handler := func(name string) runtime.Handler[order] {
		return func(ctx context.Context, o order, _ runtime.Delivery) runtime.Outcome {
			mu.Lock()
			if other, ok := running[o.ID]; ok {
				t.Errorf("order %d handled by %s while %s still handles it", o.ID, name, other)
			}
			running[o.ID] = name
			if last, ok := lastOf[o.Customer]; ok && o.ID <= last && handled[o.ID] == 0 {
				t.Errorf("%s: order %d of %s handled after %d", name, o.ID, o.Customer, last)
			}
			lastOf[o.Customer] = max(lastOf[o.Customer], o.ID)
			handled[o.ID]++
			mu.Unlock()
			if o.ID < 10 {
				time.Sleep(slow) // ignores ctx, as a slow handler may
			}
			mu.Lock()
			delete(running, o.ID)
			mu.Unlock()
			return runtime.Ack()
		}
	}
	opts := []runtime.Option{runtime.WithFailoverTime(2 * time.Second)} // a handoff waits 1 s
	a := e.broker(append(opts, runtime.WithOwnerID("a"))...)
	mustSubscribe(e, a, orders, handler("a"), runtime.StartAt(runtime.Horizon()), runtime.Workers(10), runtime.ByKey())
	e.connect(a)
	e.putOrders(orders, 0, 10, 5)
	waitStatus(e, a, orders, "a handles the first orders", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.InFlight >= 5
	})
	b := e.broker(append(opts, runtime.WithOwnerID("b"))...)
	mustSubscribe(e, b, orders, handler("b"), runtime.StartAt(runtime.Horizon()), runtime.Workers(10), runtime.ByKey())
	e.connect(b)
	stA, _ := waitStatus(e, a, orders, "a postpones the handoff", func(st runtime.Status, _ runtime.SubscriptionStatus) bool {
		return st.Leases.HandoffsPostponed > 0
	})
	postponed := uint64(0)
	for _, s := range stA.Subscriptions {
		for _, sh := range s.Shards {
			postponed += sh.HandoffsPostponed
		}
	}
	if postponed == 0 {
		t.Errorf("a's shards show no postponed handoff; its leases show %d", stA.Leases.HandoffsPostponed)
	}
	waitStatus(e, b, orders, "b holds a shard", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 1 && s.Shards[0].Lease == runtime.LeaseReading
	})
	e.putOrders(orders, 10, 10, 5)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		if n == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 20 orders handled", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a repeat would come by now
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("order %d handled %d times", id, n)
		}
	}
}
