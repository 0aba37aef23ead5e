package shard_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// zombieSubscription opens a subscription of shardID for e's consumer and
// never reads it, as a frozen owner's stays open on the service; it is
// closed when the test ends.
func zombieSubscription(t *testing.T, e *env, srv *kinesistest.Server, shardID string) *kinesis.SubscribeToShardEventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, err := srv.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: aws.String(e.consumerARN), ShardId: aws.String(shardID),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest},
	})
	if err != nil {
		t.Fatalf("SubscribeToShard: %v", err)
	}
	st := out.GetStream()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Issue 29, defect 8: a frozen owner's subscription does not keep its
// shard from the next owner longer than the service lets it. A second
// SubscribeToShard for one shard and consumer is refused
// (ResourceInUseException) within 5 s of the first, and takes the
// subscription over after that (the SubscribeToShard documentation); the
// in-process backend does the same (WithSubscriptionTakeover). The new
// owner asks once a second, the most the service allows, so it reads the
// shard within a second of the takeover time. (Before the fix it backed off
// up to 10 s between refused calls: with a takeover time of 6 s it read
// the shard 8.8 s after the frozen owner subscribed.)
func TestFanOutNewOwnerTakesAFrozenOwnersSubscriptionOver(t *testing.T) {
	const takeover = 6 * time.Second
	e, srv := fanEnv(t, 1, kinesistest.WithSubscriptionTakeover(takeover))
	id := e.shards()[0]
	frozen := zombieSubscription(t, e, srv, id)
	subscribed := time.Now()

	col := newCollector()
	cfg := e.config("b", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	b := e.start(cfg)
	eventually(t, 5*time.Second, "b reads the shard", func() bool { return slices.Equal(b.Reading(), []string{id}) })
	want := map[string]int{}
	e.publish(want, 1, 1)
	col.wait(t, 2*takeover, "b delivers the record", func(r []*shard.Record) bool { return len(r) >= 1 })
	took := time.Since(subscribed)
	t.Logf("b delivered %v after the frozen owner subscribed (takeover time %v)", took.Round(time.Millisecond), takeover)
	if bound := takeover + 1500*time.Millisecond; took > bound {
		t.Errorf("b delivered %v after the frozen owner subscribed, want within %v (the takeover time and a subscribe interval)", took, bound)
	}
	// The frozen owner's subscription ends, taken over.
	for range frozen.Events() {
	}
	var inUse *types.ResourceInUseException
	if err := frozen.Err(); !errors.As(err, &inUse) {
		t.Errorf("the frozen owner's subscription ended with %v, want a ResourceInUseException (taken over)", err)
	}
	checkKeyOrder(t, col.records(), want)
}

// An owner whose subscription another takes over (someone subscribed to
// the shard for its consumer: the lease's new owner, which took it while
// this owner was frozen) checks the lease before it subscribes again, and
// lets it go when another owner holds it, instead of taking the
// subscription back from the new owner 5 s later, and again after it.
// (Before the fix it subscribed again at once and held the lease on.)
func TestFanOutOwnerTakenOverLetsTheLeaseGo(t *testing.T) {
	fanBackends(t, testFanOutOwnerTakenOver)
}

func testFanOutOwnerTakenOver(t *testing.T, newEnv newFanEnv) {
	const takeover = time.Second
	e, srv := newEnv(t, 1, kinesistest.WithSubscriptionTakeover(takeover))
	e.liveness = shard.LivenessPerInstance // at rest, a writes nothing that would find the lease lost
	id := e.shards()[0]
	col := newCollector()
	cfg := e.config("a", col.sink)
	counters := new(shard.LeaseCounters)
	cfg.Counters = counters
	a := e.start(cfg)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return slices.Equal(a.Reading(), []string{id}) })
	// b, a live member, takes the lease (a was frozen) and subscribes, past
	// the takeover time.
	ms := e.store.(lease.MemberStore)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for beat := int64(1); ctx.Err() == nil; beat++ {
			_ = ms.Heartbeat(ctx, "test/"+e.stream, lease.Member{Owner: "b", Beat: beat, Held: 1})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	eventually(t, 5*time.Second, "b's first beat", func() bool {
		m, _ := ms.Members(ctx, "test/"+e.stream)
		return len(m) == 2
	})
	l := e.lease(id)
	if _, err := e.store.Take(context.Background(), l, "b"); err != nil {
		t.Fatalf("Take: %v", err)
	}
	time.Sleep(takeover + 100*time.Millisecond)
	zombieSubscription(t, e, srv, id)
	eventually(t, 5*time.Second, "a lets the lease go", func() bool { return len(a.Owned()) == 0 })
	if n := counters.Lost.Load(); n != 1 {
		t.Errorf("a counted %d leases lost, want 1", n)
	}
	if got := e.lease(id).Owner; got != "b" {
		t.Errorf("the lease's owner is %q, want b", got)
	}
}
