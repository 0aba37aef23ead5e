package telemetry_test

// The cost of telemetry on a queue subscriber, the variants of
// cost_test.go side by side. Apart from cost_test.go, since queues are
// newer than the runtime scripts/bench-telemetry.sh builds it against.

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// BenchmarkCostQueue: 20k ~200-byte JSON records on an on-demand stream,
// published with the variant's settings (traced records carry their trace
// context), handled through a queue by a subscription with the same
// settings (workers=8, a no-op handler) until every record is handled and
// acknowledged. Each iteration is one drain of a fresh queue from the
// stream's oldest record; it reports medians, CPU per record for the
// whole process (the in-process server's share included).
func BenchmarkCostQueue(b *testing.B) {
	const n = 20_000
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			srv := kinesistest.New()
			if err := srv.AddOnDemandStream("q"); err != nil {
				b.Fatal(err)
			}
			pb := srv.NewBroker(v.opts(b)...)
			if err := pb.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			pub := runtime.NewPublisher[costEvent](pb, runtime.PublisherSpec{Stream: "q"})
			events := costEvents(n)
			for i := 0; i < n; i += 1000 {
				if err := runtime.PublishAll(ctx, pub, events[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			_ = pb.Shutdown(ctx)
			var rate, cpu, allocs []float64
			round := 0
			for b.Loop() {
				round++
				arn, err := srv.AddQueue("q", fmt.Sprint("bench-", round), nil)
				if err != nil {
					b.Fatal(err)
				}
				goruntime.GC()
				m0, c0 := mallocs(), cpuTime()
				d := drainQueue(b, srv, arn, n, v.opts(b))
				c1, m1 := cpuTime(), mallocs()
				rate = append(rate, n/d.Seconds())
				cpu = append(cpu, float64((c1-c0).Nanoseconds())/n)
				allocs = append(allocs, float64(m1-m0)/n)
			}
			b.ReportMetric(median(rate), "rec/s")
			b.ReportMetric(median(cpu), "cpu-ns/rec")
			b.ReportMetric(median(allocs), "allocs/rec")
		})
	}
}

// drainQueue handles n records through the queue arn.
func drainQueue(tb testing.TB, srv *kinesistest.Server, arn string, n int, opts []runtime.Option) time.Duration {
	ctx := context.Background()
	var handled atomic.Int64
	done := make(chan struct{})
	b := srv.NewBroker(opts...)
	if _, err := runtime.Subscribe(b, "q", func(_ context.Context, e costEvent, _ runtime.Delivery) runtime.Outcome {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return runtime.Ack()
	}, runtime.Queue(arn), runtime.Workers(8)); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	if err := b.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		tb.Fatalf("handled %d of %d in 2 minutes", handled.Load(), n)
	}
	d := time.Since(start)
	if err := b.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
	return d
}
