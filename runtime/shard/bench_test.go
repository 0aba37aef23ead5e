package shard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

const drainRecords = 100_000

// backlog returns an in-process 4-shard stream holding n small records.
func backlog(b *testing.B, n int) (*kinesistest.Server, string) {
	srv := kinesistest.New()
	stream := fmt.Sprintf("drain-%d", streamSeq.Add(1))
	ctx := context.Background()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(4)}); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"order":12345,"customer":"customer-0000","note":"a record of about one hundred bytes for the drain"}`)
	for i := 0; i < n; i += 500 {
		entries := make([]types.PutRecordsRequestEntry, 0, 500)
		for j := i; j < min(i+500, n); j++ {
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("k%d", j%1000)), Data: data})
		}
		if _, err := srv.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries}); err != nil {
			b.Fatal(err)
		}
	}
	return srv, stream
}

// BenchmarkDrainCoordinator: records/s through the coordinator (leases,
// watermark, checkpoints every 1 s) with a sink that settles at once, from
// the first record handed to the sink (steady state); start-up, from Start
// to that first record, is reported apart (startup-ms: on a lease store
// others could share, the first pass waits a tenth of Renew for instances
// starting beside it).
func BenchmarkDrainCoordinator(b *testing.B) {
	var total, startup time.Duration
	for range b.N {
		b.StopTimer()
		srv, stream := backlog(b, drainRecords)
		var n atomic.Int64
		var first time.Time
		var once sync.Once
		done := make(chan struct{})
		c, err := shard.New(shard.Config{
			Stream: stream, Client: srv, Leases: lease.NewMemory(), Owner: "bench",
			Start: shard.Position{Kind: shard.Horizon},
			Sink: func(_ context.Context, rs []shard.Record) (int, error) {
				once.Do(func() { first = time.Now() })
				for i := range rs {
					rs[i].Settle()
				}
				if n.Add(int64(len(rs))) == drainRecords {
					close(done)
				}
				return len(rs), nil
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began := time.Now()
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-done
		end := time.Now()
		b.StopTimer()
		_ = c.Stop(context.Background())
		total += end.Sub(first)
		startup += first.Sub(began)
	}
	b.ReportMetric(float64(b.N)*drainRecords/total.Seconds(), "records/s")
	b.ReportMetric(float64(startup.Microseconds())/1e3/float64(b.N), "startup-ms")
}

// BenchmarkDrainBareLoop: the same backlog read by a goroutine per shard
// calling GetRecords with Limit 10000 and nothing else.
func BenchmarkDrainBareLoop(b *testing.B) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		srv, stream := backlog(b, drainRecords)
		b.StartTimer()
		began := time.Now()
		ctx := context.Background()
		out, err := srv.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, s := range out.Shards {
			wg.Go(func() {
				it, err := srv.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
				if err != nil {
					b.Error(err)
					return
				}
				iter := it.ShardIterator
				for n.Load() < drainRecords {
					got, err := srv.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
					if err != nil {
						b.Error(err)
						return
					}
					n.Add(int64(len(got.Records)))
					if len(got.Records) == 0 {
						return
					}
					iter = got.NextShardIterator
				}
			})
		}
		wg.Wait()
		total += time.Since(began)
		b.StopTimer()
	}
	b.ReportMetric(float64(b.N)*drainRecords/total.Seconds(), "records/s")
}
