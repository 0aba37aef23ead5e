package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// BenchmarkQueueSubscriber is a queue subscriber with workers=8 over the
// HTTP server, fed as kinesistest's BenchmarkQueueReceiveAck (its bare
// loop of ReceiveQueueRecords and AcknowledgeQueueRecords) is: 500
// records of 100 bytes a PutRecords, all handled (RawRecord, nothing to
// decode) and acknowledged before the next. records/cpu-s counts the whole
// process, the server's share included, as the bare loop's does.
func BenchmarkQueueSubscriber(b *testing.B) {
	const batch, payload = 500, 100
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
	calls := &countingQueueCalls{API: h.Client()}
	br := runtime.NewBroker(runtime.WithKinesisClient(calls), runtime.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	if err := br.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	defer br.Shutdown(ctx)
	// The loop blocks until the handlers have seen want records, as the
	// bare loop blocks on its goroutines: no polling CPU on either side.
	var handled, want atomic.Int64
	done := make(chan struct{}, 1)
	if _, err := runtime.Subscribe(br, "q", func(ctx context.Context, r runtime.RawRecord, d runtime.Delivery) runtime.Outcome {
		if handled.Add(1) >= want.Load() {
			select {
			case done <- struct{}{}:
			default:
			}
		}
		return runtime.Ack()
	}, runtime.Queue(arn), runtime.Workers(8)); err != nil {
		b.Fatal(err)
	}
	entries := make([]types.PutRecordsRequestEntry, batch)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("customer-%d", i)), Data: make([]byte, payload)}
	}
	put := &kinesis.PutRecordsInput{StreamName: aws.String("q"), Records: entries}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for b.Loop() {
		want.Add(batch)
		if _, err := s.PutRecords(ctx, put); err != nil {
			b.Fatal(err)
		}
		for handled.Load() < want.Load() {
			<-done
		}
	}
	el, used := time.Since(start), cpuTime()-cpu
	b.ReportMetric(float64(want.Load())/el.Seconds(), "records/s")
	b.ReportMetric(float64(want.Load())/used.Seconds(), "records/cpu-s")
	b.ReportMetric(float64(want.Load())/float64(calls.receives.Load()), "records/receive")
	b.ReportMetric(float64(calls.acked.Load())/float64(calls.acks.Load()), "records/ack")
}

// countingQueueCalls counts the receive and acknowledge calls.
type countingQueueCalls struct {
	kinesisapi.API
	receives, acks, acked atomic.Int64
}

func (c *countingQueueCalls) ReceiveQueueRecords(ctx context.Context, in *kinesis.ReceiveQueueRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.ReceiveQueueRecordsOutput, error) {
	c.receives.Add(1)
	return c.API.ReceiveQueueRecords(ctx, in, opts...)
}

func (c *countingQueueCalls) AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error) {
	c.acks.Add(1)
	c.acked.Add(int64(len(in.Entries)))
	return c.API.AcknowledgeQueueRecords(ctx, in, opts...)
}
