package shard_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Issue 9, scenario 13: one GetRecords answer without NextShardIterator
// (and without ChildShards) on a shard the stream lists open does not end
// the shard: the reader reopens after its last record and reads on.
func TestNilNextIteratorOnOpenShardReadsOn(t *testing.T) {
	e, _ := memEnv(t, 1)
	testNilNextIteratorOnOpenShard(t, e)
}

func testNilNextIteratorOnOpenShard(t *testing.T, e *env) {
	cut := &cutIteratorClient{API: e.client}
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Client = cut
	cfg.Start = shard.Position{Kind: shard.Horizon}
	want := map[string]int{}
	e.publish(want, 5, 1)
	e.start(cfg)
	col.waitN(t, 5)
	if cut.cut.Load() != 1 {
		t.Fatalf("the first read with records was not answered without a next iterator (cut %d)", cut.cut.Load())
	}
	e.publish(want, 5, 1)
	checkKeyOrder(t, col.waitN(t, 10), want)
	if l := e.lease(e.shards()[0]); l.Checkpoint == lease.CheckpointShardEnd {
		t.Fatalf("an open shard was checkpointed SHARD_END after one answer without a next iterator")
	}
}

// cutIteratorClient drops NextShardIterator from the first GetRecords answer
// that carries records, as a faulty server or proxy might.
type cutIteratorClient struct {
	kinesisapi.API
	cut atomic.Int32
}

func (c *cutIteratorClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.API.GetRecords(ctx, in, o...)
	if err == nil && len(out.Records) > 0 && c.cut.CompareAndSwap(0, 1) {
		cp := *out
		cp.NextShardIterator, cp.ChildShards = nil, nil
		return &cp, nil
	}
	return out, err
}
