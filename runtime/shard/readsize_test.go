package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// limitsClient records the Limit of each GetRecords call.
type limitsClient struct {
	*countingClient
	mu     sync.Mutex
	limits []int32
}

func (c *limitsClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.mu.Lock()
	c.limits = append(c.limits, aws.ToInt32(in.Limit))
	c.mu.Unlock()
	return c.countingClient.GetRecords(ctx, in, o...)
}

// A session's reads hold about BatchSize user records: a small first read,
// then BatchSize Kinesis records on a plain shard, and on a shard of KPL
// aggregates as many aggregates as hold BatchSize messages, so handling
// starts before a backlog of aggregates has all been read. Every record is
// delivered once, in order.
func TestReadsHoldAboutBatchSizeUserRecords(t *testing.T) {
	for _, aggregated := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "aggregated"}[aggregated], func(t *testing.T) {
			e, _ := memEnv(t, 1)
			total := 0
			for i := range 30 {
				if !aggregated {
					for j := range 100 {
						e.put("k", i*100+j)
					}
					total += 100
					continue
				}
				var subs []kpl.Record
				for j := range 100 {
					subs = append(subs, kpl.Record{PartitionKey: "k", Data: fmt.Appendf(nil, "k:%d", i*100+j)})
				}
				if _, err := e.client.PutRecord(e.ctx(5*time.Second), &kinesis.PutRecordInput{StreamName: aws.String(e.stream), PartitionKey: aws.String("k"), Data: kpl.Aggregate(subs)}); err != nil {
					t.Fatal(err)
				}
				total += 100
			}
			lc := &limitsClient{countingClient: &countingClient{API: e.client}}
			col := newCollector()
			cfg := e.config("a", col.sink)
			cfg.Client = lc
			cfg.Start = shard.Position{Kind: shard.Horizon}
			cfg.BatchSize = 1000
			e.start(cfg)
			recs := col.waitN(t, total)
			for i, r := range recs {
				if want := fmt.Sprintf("k:%d", i); string(r.Data) != want {
					t.Fatalf("record %d is %q, want %q", i, r.Data, want)
				}
			}
			lc.mu.Lock()
			limits := slices.Clone(lc.limits)
			lc.mu.Unlock()
			want := []int32{10, 1000} // plain: 10 records, then BatchSize records
			if aggregated {
				want = []int32{10, 10} // 10 aggregates hold 1,000 messages: 10 a read
			}
			if len(limits) < 2 || !slices.Equal(limits[:2], want) {
				t.Errorf("GetRecords limits %v, want them to begin %v", limits, want)
			}
		})
	}
}
