package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// fillStream creates stream with shards shards on srv and puts n small JSON
// orders over keys customers, straight through the API. It returns the
// sequence number of each shard's last record.
func fillStream(tb testing.TB, srv *kinesistest.Server, stream string, shards int32, n, keys int) (last map[string]string) {
	tb.Helper()
	ctx := context.Background()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(shards)}); err != nil {
		tb.Fatal(err)
	}
	last = map[string]string{}
	entries := make([]types.PutRecordsRequestEntry, 0, 500)
	flush := func() {
		out, err := srv.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			tb.Fatalf("PutRecords: %v", err)
		}
		for _, r := range out.Records {
			last[aws.ToString(r.ShardId)] = aws.ToString(r.SequenceNumber)
		}
		entries = entries[:0]
	}
	for i := range n {
		c := fmt.Sprintf("customer-%d", i%keys)
		data, _ := json.Marshal(order{ID: i, Customer: c})
		entries = append(entries, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(c)})
		if len(entries) == cap(entries) {
			flush()
		}
	}
	if len(entries) > 0 {
		flush()
	}
	return last
}

// bareDrain reads every shard of stream from the horizon with one goroutine
// per shard (GetRecords Limit 10000) and decodes every record, until n
// records are read: the floor any consumer pays on this backend. Its
// start-up runs to the first GetRecords answer with records.
func bareDrain(tb testing.TB, srv *kinesistest.Server, stream string, n int) drainTimes {
	ctx := context.Background()
	var first firstMark
	start := time.Now()
	out, err := srv.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		tb.Fatal(err)
	}
	var read atomic.Int64
	var wg sync.WaitGroup
	for _, sh := range out.Shards {
		wg.Go(func() {
			it, err := srv.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
			if err != nil {
				tb.Error(err)
				return
			}
			iter := it.ShardIterator
			for iter != nil {
				got, err := srv.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
				if err != nil {
					tb.Error(err)
					return
				}
				if len(got.Records) > 0 {
					first.mark()
				}
				for _, r := range got.Records {
					var o order
					if err := json.Unmarshal(r.Data, &o); err != nil {
						tb.Error(err)
						return
					}
				}
				read.Add(int64(len(got.Records)))
				if len(got.Records) == 0 || aws.ToInt64(got.MillisBehindLatest) == 0 && len(got.Records) < 10000 {
					return // drained
				}
				iter = got.NextShardIterator
			}
		})
	}
	wg.Wait()
	if int(read.Load()) != n {
		tb.Fatalf("bare loop read %d of %d", read.Load(), n)
	}
	end, endCPU := time.Now(), cpuTime()
	return drainTimes{startup: first.at.Sub(start), steady: end.Sub(first.at), steadyCPU: endCPU - first.cpu}
}

// drainTimes is one drain split in two: start-up, from Connect (the bare
// loop: its first call) to the first record delivered (decoded), and steady
// state, from that first record to the last one handled and checkpointed
// (read and decoded), with the CPU the process used over the steady span.
type drainTimes struct {
	startup, steady time.Duration
	steadyCPU       time.Duration
}

// firstMark stamps the first record of a drain, once, from any goroutine.
type firstMark struct {
	once sync.Once
	at   time.Time
	cpu  time.Duration
}

func (m *firstMark) mark() {
	m.once.Do(func() { m.at, m.cpu = time.Now(), cpuTime() })
}

// subscriptionDrain reads the same records through a subscription (8 lanes
// by key, a no-op handler but for stamping the first record, checkpoints
// on) until every shard's checkpoint is its last record: every record
// handled and checkpointed. Checkpoints are written every 2 ms so that the
// wait for the last one stays small against the drain. The lease store is
// shared (WithLeaseStore), so start-up includes the first pass's wait for
// instances starting beside it (BenchmarkStartup has both kinds).
func subscriptionDrain(tb testing.TB, srv *kinesistest.Server, stream string, last map[string]string) drainTimes {
	ctx := context.Background()
	leases := lease.NewMemory()
	b := runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(leases),
		runtime.WithCheckpointInterval(2*time.Millisecond))
	var first firstMark
	_, err := runtime.Subscribe(b, stream, func(context.Context, order, runtime.Delivery) runtime.Outcome {
		first.mark()
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Workers(8), runtime.ByKey())
	if err != nil {
		tb.Fatal(err)
	}
	drained := func() bool {
		ls, err := leases.List(ctx, runtime.DefaultApplication+"/"+stream)
		if err != nil {
			tb.Fatal(err)
		}
		done := 0
		for _, l := range ls {
			if l.Checkpoint == last[l.ShardID] {
				done++
			}
		}
		return done == len(last)
	}
	start := time.Now()
	if err := b.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for !drained() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatal("the subscription did not checkpoint every shard's last record within 2 minutes")
		}
	}
	end, endCPU := time.Now(), cpuTime()
	if err := b.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
	return drainTimes{startup: first.at.Sub(start), steady: end.Sub(first.at), steadyCPU: endCPU - first.cpu}
}

// BenchmarkInProcessDrain: 200k small JSON records over 4 shards, the bare
// loop and a subscription side by side, alternating, one pair per
// iteration. Steady state: records per second from each side's first record
// to its last, and CPU per record over that span; goal ratio >= 0.7.
// Start-up (Connect to the first record) is reported apart, as the
// subscription's own figure (BenchmarkStartup sets its goal). It reports
// medians over the pairs, so that one pair disturbed by other load on the
// machine does not decide.
func BenchmarkInProcessDrain(b *testing.B) {
	const n = 200_000
	srv := kinesistest.New()
	last := fillStream(b, srv, "drain", 4, n, 1000)
	var bareRate, subRate, ratio, bareCPU, subCPU, cpuRatio, subStart, bareStart []float64
	for b.Loop() {
		goruntime.GC() // the previous drain's garbage is not this one's cost
		bare := bareDrain(b, srv, "drain", n)
		goruntime.GC()
		sub := subscriptionDrain(b, srv, "drain", last)
		bareRate = append(bareRate, n/bare.steady.Seconds())
		subRate = append(subRate, n/sub.steady.Seconds())
		ratio = append(ratio, bare.steady.Seconds()/sub.steady.Seconds())
		bareCPU = append(bareCPU, float64(bare.steadyCPU.Nanoseconds())/n)
		subCPU = append(subCPU, float64(sub.steadyCPU.Nanoseconds())/n)
		cpuRatio = append(cpuRatio, float64(sub.steadyCPU)/float64(bare.steadyCPU))
		subStart = append(subStart, float64(sub.startup.Microseconds())/1e3)
		bareStart = append(bareStart, float64(bare.startup.Microseconds())/1e3)
	}
	b.ReportMetric(median(bareRate), "bare-rec/s")
	b.ReportMetric(median(subRate), "sub-rec/s")
	b.ReportMetric(median(ratio), "ratio")
	// CPU per record (user+sys of the process): on a shared machine the
	// wall-clock rates depend on what else runs; this depends less.
	b.ReportMetric(median(bareCPU), "bare-cpu-ns/rec")
	b.ReportMetric(median(subCPU), "sub-cpu-ns/rec")
	b.ReportMetric(median(cpuRatio), "cpu-ratio")
	b.ReportMetric(median(subStart), "sub-startup-ms")
	b.ReportMetric(median(bareStart), "bare-startup-ms")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// cpuTime is the user plus system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLanes: a handler that sleeps 1 ms, 8 lanes by key against 1 lane,
// per-key order checked, each timed from its first record handled (start-up
// is BenchmarkStartup's). Goal: speedup >= 6.
func BenchmarkLanes(b *testing.B) {
	const keys, perKey = 1600, 2
	srv := kinesistest.New()
	fillStream(b, srv, "lanes", 2, keys*perKey, keys)
	run := func(workers int) time.Duration {
		var (
			mu   sync.Mutex
			seen = map[string][]int{}
			left atomic.Int64
		)
		left.Store(keys * perKey)
		done := make(chan struct{})
		var first firstMark
		br := runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(lease.NewMemory()))
		_, err := runtime.Subscribe(br, "lanes", func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
			first.mark()
			time.Sleep(time.Millisecond)
			mu.Lock()
			seen[o.Customer] = append(seen[o.Customer], o.ID)
			mu.Unlock()
			if left.Add(-1) == 0 {
				close(done)
			}
			return runtime.Ack()
		}, runtime.StartAt(runtime.Horizon()), runtime.Workers(workers), runtime.ByKey())
		if err != nil {
			b.Fatal(err)
		}
		if err := br.Connect(context.Background()); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("%d records left", left.Load())
		}
		d := time.Since(first.at)
		_ = br.Shutdown(context.Background())
		for k, ids := range seen {
			if !slices.IsSorted(ids) {
				b.Fatalf("key %s handled out of order: %v", k, ids)
			}
		}
		return d
	}
	var one, eight time.Duration
	for b.Loop() {
		one += run(1)
		eight += run(8)
	}
	b.ReportMetric(one.Seconds()/float64(b.N), "1-lane-s")
	b.ReportMetric(eight.Seconds()/float64(b.N), "8-lanes-s")
	b.ReportMetric(one.Seconds()/eight.Seconds(), "speedup")
}

// BenchmarkStartup: from Connect to the first record delivered, on a
// 4-shard stream with a backlog, three ways side by side per iteration:
//
//	private  one broker with its own lease store (no WithLeaseStore): it
//	         knows no other instance can share its leases and takes them
//	         in its first pass
//	shared   one broker on a lease store others could share: its first
//	         pass finds every lease free and waits a tenth of Renew
//	         (300 ms by default) after its first heartbeat for instances
//	         starting beside it, so that each lease is taken once
//	fleet    4 brokers on one shared store, Connect called on all at once
//	         (a deploy of the whole fleet), on 8 shards: until every shard
//	         has delivered its first record
//
// Goal: private <= 50 ms; shared and fleet <= a tenth of Renew + 100 ms
// (the settle and one pass).
func BenchmarkStartup(b *testing.B) {
	srv := kinesistest.New()
	fillStream(b, srv, "startup", 4, 400, 100)
	fillStream(b, srv, "startup-fleet", 8, 800, 200)
	ctx := context.Background()
	handler := func(first *firstMark, shards *sync.Map, left *atomic.Int64, done chan struct{}) func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return func(_ context.Context, _ order, d runtime.Delivery) runtime.Outcome {
			first.mark()
			if _, seen := shards.LoadOrStore(d.ShardID, true); !seen && left.Add(-1) == 0 {
				close(done)
			}
			return runtime.Ack()
		}
	}
	// run connects brokers (all at once) on stream and returns the time to
	// the first delivery and to every one of shards shards' first delivery.
	run := func(stream string, shards int, brokers ...*runtime.Broker) (first, all time.Duration) {
		var mark firstMark
		var seen sync.Map
		var left atomic.Int64
		left.Store(int64(shards))
		done := make(chan struct{})
		for _, br := range brokers {
			if _, err := runtime.Subscribe(br, stream, handler(&mark, &seen, &left, done), runtime.StartAt(runtime.Horizon())); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, br := range brokers {
			wg.Go(func() {
				if err := br.Connect(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatalf("%s: %d shards delivered nothing within a minute", stream, left.Load())
		}
		all = time.Since(start)
		wg.Wait()
		for _, br := range brokers {
			_ = br.Shutdown(ctx)
		}
		return mark.at.Sub(start), all
	}
	var private, shared, fleetFirst, fleetAll []float64
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	for b.Loop() {
		p, _ := run("startup", 4, runtime.NewBroker(runtime.WithKinesisClient(srv)))
		s, _ := run("startup", 4, runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(lease.NewMemory())))
		store := lease.NewMemory()
		fleet := make([]*runtime.Broker, 4)
		for i := range fleet {
			fleet[i] = runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(store))
		}
		ff, fa := run("startup-fleet", 8, fleet...)
		private, shared = append(private, msOf(p)), append(shared, msOf(s))
		fleetFirst, fleetAll = append(fleetFirst, msOf(ff)), append(fleetAll, msOf(fa))
	}
	b.ReportMetric(median(private), "private-ms")
	b.ReportMetric(median(shared), "shared-ms")
	b.ReportMetric(median(fleetFirst), "fleet-first-ms")
	b.ReportMetric(median(fleetAll), "fleet-all-ms")
}

// BenchmarkPublishToHandlerLatency: from Publish returning to the handler
// starting, one record in flight at a time, in process. Goal: p50 < 1 ms.
func BenchmarkPublishToHandlerLatency(b *testing.B) {
	srv := kinesistest.New(kinesistest.WithLongPoll(10 * time.Second))
	ctx := context.Background()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("latency"), ShardCount: aws.Int32(1)}); err != nil {
		b.Fatal(err)
	}
	started := make(chan time.Time, 1)
	br := runtime.NewBroker(runtime.WithKinesisClient(srv))
	if _, err := runtime.Subscribe(br, "latency", func(context.Context, order, runtime.Delivery) runtime.Outcome {
		started <- time.Now()
		return runtime.Ack()
	}); err != nil {
		b.Fatal(err)
	}
	if err := br.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	defer br.Shutdown(ctx)
	p := runtime.NewPublisher[order](br, runtime.PublisherSpec{Stream: "latency"})
	var lat, full []time.Duration
	for b.Loop() {
		called := time.Now()
		if err := p.Message(order{ID: 1, Customer: "c"}).PartitionKey("c").Publish(ctx); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		t1 := <-started
		lat = append(lat, max(t1.Sub(t0), 0)) // the handler may start before Publish returns
		full = append(full, t1.Sub(called))
	}
	slices.Sort(lat)
	slices.Sort(full)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	// From calling Publish (batching and PutRecords included) to the handler.
	b.ReportMetric(float64(full[len(full)/2].Nanoseconds())/1e3, "call-p50-µs")
	b.ReportMetric(float64(full[len(full)*99/100].Nanoseconds())/1e3, "call-p99-µs")
}
