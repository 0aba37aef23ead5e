package telemetry_test

// The cost of telemetry: the same drain and publish workloads with
// telemetry off and (cost_on_test.go) on. This file uses nothing that
// telemetry added to the runtime, so scripts/bench-telemetry.sh also
// builds it against an older runtime and runs the three side by side.

import (
	"context"
	goruntime "runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// variant is one telemetry setting: the options of its brokers.
type variant struct {
	name string
	opts func(testing.TB) []runtime.Option
}

// variants are the settings measured; cost_on_test.go adds "on".
var variants = []variant{{name: "off", opts: func(testing.TB) []runtime.Option { return nil }}}

type costEvent struct {
	ID      int    `json:"id"`
	Kind    string `json:"kind"`
	Account string `json:"account"`
	Body    string `json:"body"`
}

func costEvents(n int) []costEvent {
	body := strings.Repeat("x", 130)
	out := make([]costEvent, n)
	for i := range out {
		out[i] = costEvent{ID: i, Kind: "order.created", Account: "acct-0042", Body: body}
	}
	return out
}

// cpuTime is the user plus system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.Mallocs
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkCostDrain: 100k ~200-byte JSON records over 4 shards, published
// with the variant's settings (traced records carry their trace context),
// drained from the horizon by a subscription with the same settings (8
// lanes by key, a no-op handler) until every record is handled. Each
// iteration is one drain; it reports medians.
func BenchmarkCostDrain(b *testing.B) {
	const n = 100_000
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			srv := kinesistest.New()
			if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("drain"), ShardCount: aws.Int32(4)}); err != nil {
				b.Fatal(err)
			}
			pb := srv.NewBroker(v.opts(b)...)
			if err := pb.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			pub := runtime.NewPublisher[costEvent](pb, runtime.PublisherSpec{Stream: "drain"})
			events := costEvents(n)
			for i := 0; i < n; i += 1000 {
				if err := runtime.PublishAll(ctx, pub, events[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			_ = pb.Shutdown(ctx)
			var rate, cpu, allocs []float64
			for b.Loop() {
				goruntime.GC()
				m0, c0 := mallocs(), cpuTime()
				d := drain(b, srv, n, v.opts(b))
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

// drain reads the stream from its horizon until n records are handled.
func drain(tb testing.TB, srv *kinesistest.Server, n int, opts []runtime.Option) time.Duration {
	ctx := context.Background()
	var handled atomic.Int64
	done := make(chan struct{})
	b := srv.NewBroker(append([]runtime.Option{runtime.WithLeaseStore(lease.NewMemory())}, opts...)...)
	if _, err := runtime.Subscribe(b, "drain", func(_ context.Context, e costEvent, _ runtime.Delivery) runtime.Outcome {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Workers(8), runtime.ByKey()); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	if err := b.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		tb.Fatalf("drained %d of %d in 2 minutes", handled.Load(), n)
	}
	d := time.Since(start)
	if err := b.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
	return d
}

// BenchmarkCostPublish publishes ~200-byte JSON messages from 512 ×
// GOMAXPROCS concurrent callers, each waiting for its own result, as
// runtime's BenchmarkPublish does.
func BenchmarkCostPublish(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			srv := kinesistest.New()
			if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("pub"), ShardCount: aws.Int32(4)}); err != nil {
				b.Fatal(err)
			}
			br := srv.NewBroker(v.opts(b)...)
			if err := br.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			defer br.Shutdown(ctx)
			p := runtime.NewPublisher[costEvent](br, runtime.PublisherSpec{Stream: "pub"})
			e := costEvents(1)[0]
			b.SetParallelism(512)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.Publish(ctx, e); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
