package shard_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// A lease taken while a heartbeat is confirmed is fenced no earlier than
// the leases held then. With liveness per instance, a take's fence is no
// later than the last confirmed beat's; a beat confirmed between the
// take's answer and the lease's being held renewed only the leases held,
// and the new one kept the beat before's fence: under a store answering
// 0.85 s late it alone fenced before the next beat's answer (fleettest/dst
// mix all, seed 353). Here a's heartbeats run every second; shard 1
// appears by a split at 1.5 s, and a beat lands as a takes its child.
func TestLeaseTakenAsABeatLandsIsFencedWithTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		srv := kinesistest.New()
		if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("s"), ShardCount: aws.Int32(1)}); err != nil {
			t.Fatal(err)
		}
		cfg := shard.Config{
			Stream: "s", Namespace: "t/s", Client: srv, Leases: lease.NewMemory(), Owner: "a",
			Sink:     func(ctx context.Context, rs []shard.Record) (int, error) { return len(rs), nil },
			Failover: 3 * time.Second, Renew: time.Second, Sync: 100 * time.Millisecond,
			Liveness: shard.LivenessPerInstance,
		}
		c, err := shard.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		var takes int
		restore := shard.BeforeHold(func() {
			takes++
			if takes > 1 { // the children, not the first shard
				once.Do(func() {
					if err := c.HeartbeatNow(ctx); err != nil {
						t.Errorf("heartbeat: %v", err)
					}
				})
			}
		})
		defer restore()
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
		time.Sleep(1500 * time.Millisecond)
		if _, err := srv.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("s"), ShardToSplit: aws.String("shardId-000000000000"),
			NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
			t.Fatal(err)
		}
		// Looked at before a's next heartbeat (at 2 s) renews every lease.
		time.Sleep(300 * time.Millisecond)
		fences := c.Fences()
		if len(fences) < 2 {
			t.Fatalf("a holds %v; want the split's children", fences)
		}
		var latest time.Time
		for _, f := range fences {
			if f.After(latest) {
				latest = f
			}
		}
		for id, f := range fences {
			if f.Before(latest) {
				t.Errorf("%s is fenced %v before the other leases a holds (%v): a heartbeat confirmed while it was taken did not renew it",
					id, latest.Sub(f), fences)
			}
		}
	})
}

// A lease past its fence by the monotonic clock is not read, and Reading
// says so before the fence's timer runs, which on a busy machine may run
// late (TestLateAnsweredOwnerIsSeenFencedAtItsFence saw a, fenced by the
// clock, and b, which had taken the lease, both read a shard: a's timer
// had not run yet under make test's load).
func TestReadingLeavesOutALeasePastItsFence(t *testing.T) {
	e, _ := memEnv(t, 1)
	ids := e.shards()
	store := newSlowStore(e.store)
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = store
	cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return slices.Equal(c.Reading(), ids) })
	restore := shard.DelayFences(time.Minute)
	defer restore()
	store.set(0, time.Minute) // every write lands and is answered past its deadline: nothing renews
	time.Sleep(2 * cfg.Failover)
	if r := c.Reading(); len(r) != 0 {
		t.Errorf("a reads %v two failover times after its renewals stopped being answered; want none (past its fence by the clock)", r)
	}
}
