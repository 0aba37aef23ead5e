package runtime_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// A merge whose two parents two instances read: the child starts only
// after each parent has been read to its end, here after the slower one's
// stuck record settles, so each key's order holds across the merge. In
// both liveness modes.
func TestMergeOfParentsReadByTwoInstancesWaitsForBoth(t *testing.T) {
	for name, opts := range map[string][]runtime.Option{"per-instance": nil, "per-lease": {runtime.WithPerLeaseRenewal()}} {
		t.Run(name, func(t *testing.T) { testMergeOfTwoOwners(t, opts) })
	}
}

func testMergeOfTwoOwners(t *testing.T, opts []runtime.Option) {
	e := newEnv(t)
	orders := e.newStream("orders", 2)
	var (
		mu  sync.Mutex
		log []string // "key#id" in the order handlers finished
	)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // a failed test does not hold the shutdown
	handled := make(chan string, 64)
	handler := func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if o.ID == 0 && o.Customer == "stuck" {
			<-gate
		}
		mu.Lock()
		log = append(log, fmt.Sprintf("%s#%d", o.Customer, o.ID))
		mu.Unlock()
		handled <- fmt.Sprintf("%s#%d", o.Customer, o.ID)
		return runtime.Ack()
	}
	b1 := e.broker(append([]runtime.Option{runtime.WithOwnerID("a")}, opts...)...)
	b2 := e.broker(append([]runtime.Option{runtime.WithOwnerID("b")}, opts...)...)
	for _, b := range []*runtime.Broker{b1, b2} {
		mustSubscribe(e, b, orders, handler)
		e.connect(b)
	}
	owner := map[string]string{}
	eventuallyRT(t, 10*time.Second, "each instance reads one shard", func() bool {
		clear(owner)
		for _, l := range e.leases(orders) {
			owner[l.Owner] = l.ShardID
		}
		return owner["a"] != "" && owner["b"] != ""
	})
	out, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: aws.String(orders)})
	if err != nil {
		t.Fatal(err)
	}
	// A key for each parent: "stuck" lands on a's shard, "free" on b's.
	keyOn := func(shardID, base string) string {
		for _, s := range out.Shards {
			if *s.ShardId != shardID {
				continue
			}
			lo, _ := new(big.Int).SetString(*s.HashKeyRange.StartingHashKey, 10)
			hi, _ := new(big.Int).SetString(*s.HashKeyRange.EndingHashKey, 10)
			for i := 0; ; i++ {
				k := fmt.Sprintf("%s-%d", base, i)
				sum := md5.Sum([]byte(k))
				h := new(big.Int).SetBytes(sum[:])
				if h.Cmp(lo) >= 0 && h.Cmp(hi) <= 0 {
					return k
				}
			}
		}
		t.Fatalf("no shard %s", shardID)
		return ""
	}
	stuckKey, freeKey := keyOn(owner["a"], "s"), keyOn(owner["b"], "f")
	pub := runtime.NewPublisher[order](b1, runtime.PublisherSpec{Stream: orders})
	send := func(key, name string, id int) {
		t.Helper()
		if err := pub.Message(order{ID: id, Customer: name}).PartitionKey(key).Publish(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	send(stuckKey, "stuck", 0)
	send(freeKey, "free", 0)
	if got := receive(e, handled, 1)[0]; got != "free#0" {
		t.Fatalf("handled %s first, want free#0 (stuck#0 is held)", got)
	}
	if _, err := e.api.MergeShards(e.ctx, &kinesis.MergeShardsInput{StreamName: aws.String(orders),
		ShardToMerge: aws.String(owner["a"]), AdjacentShardToMerge: aws.String(owner["b"])}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	send(stuckKey, "stuck", 1)
	send(freeKey, "free", 1)
	// Many shard syncs (200 ms) and lease passes: b's parent has ended, a's
	// has not, so the child is not read.
	select {
	case got := <-handled:
		t.Fatalf("handled %s while a parent of the merged child is not read to its end", got)
	case <-time.After(1500 * time.Millisecond):
	}
	release()
	receive(e, handled, 3)
	mu.Lock()
	defer mu.Unlock()
	pos := map[string]int{}
	for i, s := range log {
		pos[s] = i
	}
	if pos["stuck#0"] > pos["stuck#1"] || pos["free#0"] > pos["free#1"] {
		t.Fatalf("handled %v: a key's order broke across the merge", log)
	}
}

func eventuallyRT(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
