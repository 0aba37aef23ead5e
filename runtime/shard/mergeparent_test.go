package shard_test

import (
	"context"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// noListing fails ListShards while off is set (ListShards throttled, as it
// is at a few calls a second): the coordinator learns of new shards only
// from the ChildShards of a parent's last read.
type noListing struct {
	kinesisapi.API
	off atomic.Bool
}

func (c *noListing) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if c.off.Load() {
		return nil, errors.New("injected: ListShards unavailable")
	}
	return c.API.ListShards(ctx, in, o...)
}

// A merge's child named by the ChildShards of one parent's end must not
// be read while its other parent, itself a split's child not yet leased
// (its own parent still being read), has records of the same keys: the
// child's lease is created only once each of its parents has one, so the
// parents-first rule holds (soak seeds 1796534455378349340 of mix basic
// and 1796534525113198913 of aggregate: a crash, a split, a merge and a
// key's order broken across the merge's child and the split's child).
//
// Shards s0 [0, mid) and s1 [mid, max]; s1 splits into s2 [mid, q) and
// s3 [q, max]; s0 and s2 merge into s4. One hash key, mid, lands on s1,
// then s2 (record 1), then s4 (record 2). s1's reader is held at its end
// by a record not settled, so s2 has no lease when s0 ends.
func TestMergeChildWaitsForUnleasedParent(t *testing.T) {
	eachLiveness(t, testMergeChildWaitsForUnleasedParent)
}

func testMergeChildWaitsForUnleasedParent(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	client := &noListing{API: e.client}
	e.coordClient = client
	ids := e.shards()
	s0, s1 := ids[0], ids[1]
	const mid = "170141183460469231731687303715884105728" // s1's starting hash key
	col := newCollector()
	var release atomic.Bool
	col.hold = func(r *shard.Record) bool { return r.ShardID == s1 && !release.Load() }
	cfg := e.config("a", col.sink)
	cfg.Failover = 3 * time.Second // a renewal lagging under a loaded -race run must not fence a and redeliver record 0
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(c.Reading()) == 2 })

	put := func(n string) string {
		out, err := e.client.PutRecord(e.ctx(10*time.Second), &kinesis.PutRecordInput{
			StreamName: aws.String(e.stream), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(mid), Data: []byte("k:" + n),
		})
		if err != nil {
			t.Fatalf("PutRecord: %v", err)
		}
		return aws.ToString(out.ShardId)
	}
	if got := put("0"); got != s1 {
		t.Fatalf("record 0 on %s, want %s", got, s1)
	}
	col.waitN(t, 1) // delivered, held: s1's reader cannot finish
	client.off.Store(true)

	q := new(big.Int).SetBytes([]byte{0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}).String()
	if _, err := e.client.SplitShard(e.ctx(10*time.Second), &kinesis.SplitShardInput{
		StreamName: aws.String(e.stream), ShardToSplit: aws.String(s1), NewStartingHashKey: aws.String(q),
	}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	s2 := put("1")
	merge(t, e, s0, s2)
	s4 := put("2")
	if s2 == s1 || s4 == s2 {
		t.Fatalf("records landed on %s, %s, %s: the reshard did not route them", s1, s2, s4)
	}

	// s0 is read to its end now; its child s4 must wait for s2, also
	// once the listings show every shard again.
	eventually(t, 5*time.Second, "SHARD_END of "+s0, func() bool { return e.lease(s0).Checkpoint == lease.CheckpointShardEnd })
	client.off.Store(false)
	time.Sleep(5 * e.config("", nil).Poll)
	for _, r := range col.records() {
		if r.ShardID == s4 {
			t.Fatalf("merge child %s read (record %s) while its parent %s had no lease and was unread", s4, r.Data, s2)
		}
	}

	release.Store(true)
	for _, r := range col.records() { // record 0, held on s1 (twice, if a's lease lapsed under load)
		if r.ShardID == s1 {
			r.Settle()
		}
	}
	recs := col.wait(t, 10*time.Second, "the 3 records", func(r []*shard.Record) bool { return len(r) >= 3 })
	checkKeyOrder(t, recs, map[string]int{"k": 3})
}
