package kinesistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// Benchmarks of the in-process backend, reported in records/s:
//
//	go test -run '^$' -bench . -cpu 1 ./runtime/kinesistest/
//
// records/s is per wall-clock second; records/cpu-s per second of CPU the
// process used, which stays meaningful on a machine other work shares.
const (
	benchShards  = 4
	benchPayload = 100 // bytes per record
	benchBatch   = 500 // records per PutRecords call, the service's maximum
	benchRefill  = 2000
)

func benchEntries(n int) []types.PutRecordsRequestEntry {
	payload := make([]byte, benchPayload)
	entries := make([]types.PutRecordsRequestEntry, n)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("customer-%d", i)), Data: payload}
	}
	return entries
}

// recreate empties the stream so a long benchmark does not hold every
// record it ever wrote.
func recreate(b *testing.B, s *kinesistest.Server, name string) {
	b.Helper()
	_, _ = s.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: &name})
	if err := s.AddStream(name, benchShards); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPutRecords(b *testing.B) {
	s := kinesistest.New()
	recreate(b, s, "bench")
	in := &kinesis.PutRecordsInput{StreamName: aws.String("bench"), Records: benchEntries(benchBatch)}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%benchRefill == 0 {
			b.StopTimer()
			recreate(b, s, "bench")
			b.StartTimer()
		}
		out, err := s.PutRecords(ctx, in)
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			b.Fatal(err)
		}
	}
	report(b, float64(b.N*benchBatch), start, cpu)
}

func BenchmarkPutRecordsParallel(b *testing.B) {
	s := kinesistest.New(kinesistest.WithRetention(time.Second))
	recreate(b, s, "bench")
	ctx := context.Background()
	b.ReportAllocs()
	start, cpu := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		in := &kinesis.PutRecordsInput{StreamName: aws.String("bench"), Records: benchEntries(benchBatch)}
		for pb.Next() {
			if _, err := s.PutRecords(ctx, in); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, float64(b.N*benchBatch), start, cpu)
}

func BenchmarkPutRecord(b *testing.B) {
	s := kinesistest.New()
	recreate(b, s, "bench")
	in := &kinesis.PutRecordInput{StreamName: aws.String("bench"), PartitionKey: aws.String("customer-1"), Data: make([]byte, benchPayload)}
	ctx := context.Background()
	b.ReportAllocs()
	start, cpu := time.Now(), cpuTime()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%(benchRefill*benchBatch) == 0 {
			b.StopTimer()
			recreate(b, s, "bench")
			b.StartTimer()
		}
		if _, err := s.PutRecord(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	report(b, float64(b.N), start, cpu)
}

// BenchmarkGetRecords reads a shard of 100,000 stored records in answers of
// up to 1,000, starting over at the trim horizon when it reaches the tip.
func BenchmarkGetRecords(b *testing.B) {
	const stored, limit = 100_000, 1000
	s := kinesistest.New()
	if err := s.AddStream("bench", 1); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	entries := benchEntries(benchBatch)
	for range stored / benchBatch {
		if _, err := s.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("bench"), Records: entries}); err != nil {
			b.Fatal(err)
		}
	}
	horizon := func() *string {
		out, err := s.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("bench"), ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			b.Fatal(err)
		}
		return out.ShardIterator
	}
	in := &kinesis.GetRecordsInput{ShardIterator: horizon(), Limit: aws.Int32(limit)}
	records := 0
	b.ReportAllocs()
	start, cpu := time.Now(), cpuTime()
	for b.Loop() {
		out, err := s.GetRecords(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		records += len(out.Records)
		if len(out.Records) == 0 {
			in.ShardIterator = horizon()
			continue
		}
		in.ShardIterator = out.NextShardIterator
	}
	report(b, float64(records), start, cpu)
}

func report(b *testing.B, records float64, start time.Time, cpu time.Duration) {
	b.ReportMetric(records/time.Since(start).Seconds(), "records/s")
	if used := cpuTime() - cpu; used > 0 {
		b.ReportMetric(records/used.Seconds(), "records/cpu-s")
	}
}

// BenchmarkQueueReceiveAck is the bare loop of a queue consumer over the
// HTTP server: 8 goroutines receive up to 10 records and acknowledge them
// in one call, while the stream is refilled ahead of them.
func BenchmarkQueueReceiveAck(b *testing.B) {
	s := kinesistest.New()
	if err := s.AddOnDemandStream("q"); err != nil {
		b.Fatal(err)
	}
	arn, err := s.AddQueue("q", "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	h := kinesistest.NewHTTPServer(s)
	defer h.Close()
	c := h.Client()
	ctx := context.Background()
	put := &kinesis.PutRecordsInput{StreamName: aws.String("q"), Records: benchEntries(benchBatch)}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	var n int64
	for b.Loop() {
		if _, err := s.PutRecords(ctx, put); err != nil {
			b.Fatal(err)
		}
		done := make(chan int, 8)
		for range 8 {
			go func() {
				got := 0
				for got < benchBatch/8 {
					out, err := c.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
					if err != nil || len(out.QueueRecords) == 0 {
						break
					}
					in := &kinesis.AcknowledgeQueueRecordsInput{QueueARN: &arn}
					for _, r := range out.QueueRecords {
						in.Entries = append(in.Entries, types.AcknowledgeQueueRecordsRequestEntry{ReceiptHandle: r.ReceiptHandle})
					}
					if _, err := c.AcknowledgeQueueRecords(ctx, in); err != nil {
						break
					}
					got += len(out.QueueRecords)
				}
				done <- got
			}()
		}
		for range 8 {
			n += int64(<-done)
		}
	}
	el, used := time.Since(start), cpuTime()-cpu
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
	b.ReportMetric(float64(n)/used.Seconds(), "records/cpu-s")
}
