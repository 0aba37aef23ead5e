package telemetry_test

// The cost of telemetry in Lambda mode, the variants of cost_test.go side
// by side. Apart from cost_test.go, as cost_queue_test.go is.

import (
	"context"
	goruntime "runtime"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// BenchmarkCostLambda: one invocation of 10k ~200-byte JSON records of one
// shard, published with the variant's settings (traced records carry
// their trace context), handled by kinesislambda.Handler over a broker
// with the same settings (workers=8 by_key, a no-op handler). The event
// is read once, by kinesistest's event source mapping; each iteration
// hands the same event to the handler. It reports medians; CPU per record
// is the whole process's over the invocation.
func BenchmarkCostLambda(b *testing.B) {
	const n = 10_000
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			srv := kinesistest.New()
			if err := srv.AddStream("orders", 1); err != nil {
				b.Fatal(err)
			}
			pb := srv.NewBroker(v.opts(b)...)
			if err := pb.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			pub := runtime.NewPublisher[costEvent](pb, runtime.PublisherSpec{Stream: "orders"})
			evs := costEvents(n)
			for i := 0; i < n; i += 1000 {
				if err := runtime.PublishAll(ctx, pub, evs[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			_ = pb.Shutdown(ctx)
			var ev events.KinesisEvent
			if _, err := srv.Drain(ctx, kinesistest.EventSourceMapping{Stream: "orders", BatchSize: n, Function: func(_ context.Context, e events.KinesisEvent) (events.KinesisEventResponse, error) {
				ev.Records = append(ev.Records, e.Records...)
				return events.KinesisEventResponse{}, nil
			}}); err != nil {
				b.Fatal(err)
			}
			if len(ev.Records) != n {
				b.Fatalf("%d records read, want %d", len(ev.Records), n)
			}
			br := srv.NewBroker(v.opts(b)...)
			if _, err := runtime.Subscribe(br, "orders", func(_ context.Context, e costEvent, _ runtime.Delivery) runtime.Outcome {
				return runtime.Ack()
			}, runtime.Workers(8), runtime.ByKey()); err != nil {
				b.Fatal(err)
			}
			fn := kinesislambda.Handler(br)
			var cpu, allocs []float64
			for b.Loop() {
				goruntime.GC()
				m0, c0 := mallocs(), cpuTime()
				resp, err := fn(ctx, ev)
				c1, m1 := cpuTime(), mallocs()
				if err != nil || len(resp.BatchItemFailures) > 0 {
					b.Fatalf("resp %+v, err %v", resp, err)
				}
				cpu = append(cpu, float64((c1-c0).Nanoseconds())/n)
				allocs = append(allocs, float64(m1-m0)/n)
			}
			b.ReportMetric(median(cpu), "cpu-ns/rec")
			b.ReportMetric(median(allocs), "allocs/rec")
		})
	}
}
