package runtime_test

import (
	"context"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

type benchEvent struct {
	ID      int    `json:"id"`
	Kind    string `json:"kind"`
	Account string `json:"account"`
	Body    string `json:"body"`
}

// BenchmarkPublish publishes ~200-byte JSON messages through the batcher to
// the in-process backend from many concurrent callers (parallelism × GOMAXPROCS
// goroutines), each waiting for its own result. Run with -cpu 1 for one core.
func BenchmarkPublish(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "unique-keys"
		if keyed {
			name = "64-keys"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			_, br, stream := benchBroker(b)
			p := runtime.NewPublisher[benchEvent](br, runtime.PublisherSpec{Stream: stream})
			body := strings.Repeat("x", 130)
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = "customer-" + string(rune('A'+i%26)) + string(rune('a'+i/26))
			}
			b.SetParallelism(512)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					m := p.Message(benchEvent{ID: i, Kind: "order.created", Account: "acct-0042", Body: body})
					if keyed {
						m.PartitionKey(keys[i%len(keys)])
					}
					if err := m.Publish(ctx); err != nil {
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

// BenchmarkPublishAll publishes the same messages through PublishAll, 500
// at a time from each of GOMAXPROCS goroutines.
func BenchmarkPublishAll(b *testing.B) {
	ctx := context.Background()
	_, br, stream := benchBroker(b)
	p := runtime.NewPublisher[benchEvent](br, runtime.PublisherSpec{Stream: stream})
	body := strings.Repeat("x", 130)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		msgs := make([]benchEvent, 0, 500)
		flush := func() {
			if err := runtime.PublishAll(ctx, p, msgs); err != nil {
				b.Error(err)
			}
			msgs = msgs[:0]
		}
		for i := 0; pb.Next(); i++ {
			msgs = append(msgs, benchEvent{ID: i, Kind: "order.created", Account: "acct-0042", Body: body})
			if len(msgs) == cap(msgs) {
				flush()
			}
		}
		flush()
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkPublishAggregated publishes the messages of BenchmarkPublish
// over 10,000 keys to the in-process backend, plain and aggregated, side by
// side: messages per second, and the Kinesis records and bytes (data plus
// key) stored per message.
func BenchmarkPublishAggregated(b *testing.B) {
	for _, agg := range []bool{false, true} {
		name := "plain"
		if agg {
			name = "aggregated"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s, br, stream := benchBroker(b)
			p := runtime.NewPublisher[benchEvent](br, runtime.PublisherSpec{Stream: stream, Aggregate: agg})
			body := strings.Repeat("x", 130)
			keys := make([]string, 10000)
			for i := range keys {
				keys[i] = "customer-" + strconv.Itoa(i)
			}
			var next atomic.Int64
			b.SetParallelism(512)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine publishes under its own keys, one after another.
				g := int(next.Add(1))
				for i := 0; pb.Next(); i++ {
					k := keys[(g+i*4096)%len(keys)]
					if err := p.Message(benchEvent{ID: i, Kind: "order.created", Account: "acct-0042", Body: body}).PartitionKey(k).Publish(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			recs, err := s.Records(stream)
			if err != nil {
				b.Fatal(err)
			}
			bytes := 0
			for _, r := range recs {
				bytes += len(r.Data) + len(*r.PartitionKey)
			}
			b.ReportMetric(float64(len(recs))/float64(b.N), "records/msg")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/msg")
		})
	}
}

// BenchmarkAggregatedCPU measures the client's CPU per message of an
// aggregating publisher on the in-process backend (whose own cost per
// aggregate is small), the ways cmd/aggregate in bench/ drives it:
// publish, 2,048 goroutines each publishing its own keys' messages one
// Publish at a time (agg); sendall, 4 goroutines each sending its keys'
// messages 500 per SendAll (agg-all); startall, the same with StartAll,
// each goroutine keeping two batches on their way (agg-pipe). 10,000
// keys, ~200-byte JSON messages. cpu-ns/msg is the process's user plus
// system time per message (getrusage), which a shared machine disturbs
// less than the wall clock.
func BenchmarkAggregatedCPU(b *testing.B) {
	for _, mode := range []string{"publish", "sendall", "startall"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			r := runAggregated(b, mode, b.N)
			b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
			b.ReportMetric(float64(b.N)/r.wall.Seconds(), "msgs/s")
			if r.calls > 0 {
				b.ReportMetric(float64(r.records)/float64(r.calls), "records/call")
			}
		})
	}
}

// BenchmarkAggregatedPublishVsStartAll runs the publish and startall modes
// of BenchmarkAggregatedCPU side by side, b.N messages each, and reports
// their ratios (issue 34: Publish from many goroutines as fast as the
// batch API): publish/startall-rate (goal ≥ 0.9) and
// publish/startall-cpu, the client CPU per message of each mode, and
// each one's allocations per message (the runtime's and the benchmark's
// own: a Message and a key per message).
func BenchmarkAggregatedPublishVsStartAll(b *testing.B) {
	pub := runAggregated(b, "publish", b.N)
	all := runAggregated(b, "startall", b.N)
	n := float64(b.N)
	b.ReportMetric((n/pub.wall.Seconds())/(n/all.wall.Seconds()), "publish/startall-rate")
	b.ReportMetric(float64(pub.cpu)/float64(all.cpu), "publish/startall-cpu")
	b.ReportMetric(float64(pub.cpu.Nanoseconds())/n, "publish-cpu-ns/msg")
	b.ReportMetric(float64(all.cpu.Nanoseconds())/n, "startall-cpu-ns/msg")
	b.ReportMetric(float64(pub.allocs)/n, "publish-allocs/msg")
	b.ReportMetric(float64(all.allocs)/n, "startall-allocs/msg")
	if pub.calls > 0 && all.calls > 0 {
		// Aggregates per PutRecords call: each call costs the client its
		// HTTP and SDK work, so fewer, fuller calls cost less a message.
		b.ReportMetric(float64(pub.records)/float64(pub.calls), "publish-records/call")
		b.ReportMetric(float64(all.records)/float64(all.calls), "startall-records/call")
		b.ReportMetric(n/float64(pub.calls), "publish-msgs/call")
		b.ReportMetric(n/float64(all.calls), "startall-msgs/call")
	}
}

// aggregatedRun is what one mode of runAggregated took.
type aggregatedRun struct {
	wall, cpu      time.Duration
	allocs         uint64 // heap allocations of the whole process
	records, calls int    // Kinesis records stored, PutRecords calls
}

// runAggregated publishes n messages of 10,000 keys through a fresh
// aggregating publisher on the in-process backend, one of the ways of
// BenchmarkAggregatedCPU, and measures it (the benchmark's timer runs only
// while it publishes).
func runAggregated(b *testing.B, mode string, n int) aggregatedRun {
	b.StopTimer()
	ctx := context.Background()
	s, br, stream := benchBroker(b)
	p := runtime.NewPublisher[*benchEvent](br, runtime.PublisherSpec{Stream: stream, Aggregate: true})
	body := strings.Repeat("x", 130)
	const keys = 10000
	callers, bulk, depth := 2048, 1, 1
	switch mode {
	case "sendall":
		callers, bulk = 4, 500
	case "startall":
		callers, bulk, depth = 4, 500, 2
	}
	events := make([]benchEvent, n)
	mine := make([][]int, callers)
	for i := range events {
		events[i] = benchEvent{ID: i, Kind: "order.created", Account: "acct-0042", Body: body}
		mine[(i%keys)%callers] = append(mine[(i%keys)%callers], i)
	}
	key := func(i int) string { return "customer-" + strconv.Itoa(i%keys) }
	var wg sync.WaitGroup
	goruntime.GC()
	var m0, m1 goruntime.MemStats
	goruntime.ReadMemStats(&m0)
	b.StartTimer()
	c0, t0 := cpuTime(), time.Now()
	for c := range callers {
		wg.Go(func() {
			ids := mine[c]
			msgs := make([]*runtime.Message[*benchEvent], 0, bulk)
			var started []*runtime.Pending
			for len(ids) > 0 {
				chunk := ids[:min(bulk, len(ids))]
				ids = ids[len(chunk):]
				if bulk == 1 {
					if err := p.Message(&events[chunk[0]]).PartitionKey(key(chunk[0])).Publish(ctx); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				msgs = msgs[:0]
				for _, i := range chunk {
					msgs = append(msgs, p.Message(&events[i]).PartitionKey(key(i)))
				}
				if depth == 1 {
					if _, err := runtime.SendAll(ctx, msgs); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				started = append(started, runtime.StartAll(ctx, msgs)) // msgs is not kept
				if len(started) == depth {
					if _, err := started[0].Wait(); err != nil {
						b.Error(err)
						return
					}
					started = started[1:]
				}
			}
			for _, pd := range started {
				if _, err := pd.Wait(); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	r := aggregatedRun{cpu: cpuTime() - c0, wall: time.Since(t0)}
	b.StopTimer()
	goruntime.ReadMemStats(&m1)
	r.allocs = m1.Mallocs - m0.Mallocs
	recs, err := s.Records(stream)
	if err != nil {
		b.Fatal(err)
	}
	r.records, r.calls = len(recs), int(s.Calls(kinesistest.OpPutRecords))
	b.StartTimer()
	return r
}

// benchBroker is a broker connected to a fresh in-process backend with one
// 4-shard stream; it shuts down when the benchmark ends.
func benchBroker(b *testing.B) (*kinesistest.Server, *runtime.Broker, string) {
	b.Helper()
	ctx := context.Background()
	s := kinesistest.New()
	stream := createStream(ctx, b, s, 4)
	br := runtime.NewBroker(runtime.WithKinesisClient(s))
	if err := br.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Shutdown(ctx) })
	return s, br, stream
}

// BenchmarkPublishHandoff measures what BenchmarkAggregatedCPU's publish
// mode pays that its startall mode does not, and that no aggregator can
// save: each of 2,048 callers hands one message to a server goroutine and
// waits for its own answer, as Publish does (a mutex-guarded queue, a poke
// on a channel of capacity 1, the answer on the caller's own channel of
// capacity 1), with nothing else done. Its cpu-ns/msg is the floor of
// Publish's CPU beyond StartAll's, which waits once for 500 messages
// (BENCHMARKS.md, 'Aggregated publishing').
func BenchmarkPublishHandoff(b *testing.B) {
	const callers = 2048
	type waiter struct{ done chan struct{} }
	var (
		mu       sync.Mutex
		incoming []*waiter
		wake     = make(chan struct{}, 1)
		stop     = make(chan struct{})
	)
	go func() {
		var in []*waiter
		for {
			select {
			case <-wake:
			case <-stop:
				return
			}
			mu.Lock()
			if len(incoming) < runtime.AggGather {
				// As the aggregator does: let the other callers that are
				// ready to run queue theirs first, one pass for them all.
				mu.Unlock()
				goruntime.Gosched()
				mu.Lock()
			}
			in, incoming = incoming, in[:0]
			mu.Unlock()
			for _, w := range in {
				w.done <- struct{}{}
			}
			clear(in)
		}
	}()
	defer close(stop)
	var wg sync.WaitGroup
	per := b.N / callers
	goruntime.GC()
	b.ResetTimer()
	c0 := cpuTime()
	for c := range callers {
		n := per
		if c < b.N%callers {
			n++
		}
		wg.Go(func() {
			w := &waiter{done: make(chan struct{}, 1)}
			for range n {
				mu.Lock()
				incoming = append(incoming, w)
				poke := len(incoming) == 1
				mu.Unlock()
				if poke {
					select {
					case wake <- struct{}{}:
					default:
					}
				}
				<-w.done
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/msg")
}
