package runtime_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// laneOf is the lane a by-key subscription of n workers puts key on
// (FNV-1a, as the runtime hashes).
func laneOf(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Issue 9, scenario 9: one stuck handler pauses its shard's reader in every
// lane mode: the records handed out stay within 256 per worker of the stuck
// one, however many wait in the shard, and the shard goes on once the
// handler returns. With by-key, the other keys are chosen on the other
// lanes, whose queues never fill.
func TestStuckHandlerBoundsTheShardsRecordsInFlight(t *testing.T) {
	const workers, backlog = 4, 6000
	const bound = 256 * workers
	for _, byKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("by_key=%v", byKey), func(t *testing.T) {
			e := newEnv(t)
			orders := e.newStream("orders", 1)
			pub := e.publisher(orders)
			e.publish(pub, order{ID: 0, Customer: "stuck"})
			for i, k := 1, 0; i < backlog; k++ {
				key := fmt.Sprintf("k%d", k)
				if byKey && laneOf(key, workers) == laneOf("stuck", workers) {
					continue
				}
				if err := pub.Message(order{ID: i, Customer: key}).PartitionKey(key).Publish(e.ctx); err != nil {
					t.Fatal(err)
				}
				i++
			}

			release := make(chan struct{})
			var handed atomic.Int64
			done := make(chan int, backlog)
			opts := []runtime.SubscribeOption{runtime.StartAt(runtime.Horizon()), runtime.Workers(workers), runtime.BatchSize(500)}
			if byKey {
				opts = append(opts, runtime.ByKey())
			}
			b := e.broker()
			mustSubscribe(e, b, orders, func(ctx context.Context, o order, _ runtime.Delivery) runtime.Outcome {
				handed.Add(1)
				if o.ID == 0 {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				done <- o.ID
				return runtime.Ack()
			}, opts...)
			e.connect(b)

			// Wait until the handing out stops (or runs away).
			last, still := int64(-1), 0
			for still < 5 {
				time.Sleep(50 * time.Millisecond)
				n := handed.Load()
				if n > bound {
					close(release)
					t.Fatalf("%d records handed out behind one stuck record, want at most %d", n, bound)
				}
				if n == last {
					still++
				} else {
					last, still = n, 0
				}
			}
			if last < 2 {
				t.Fatalf("only %d records handed out: the other workers should go on up to the bound", last)
			}
			close(release)
			receive(e, done, backlog) // the shard goes on: every record is handled
		})
	}
}
