package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// meter is a meter provider read on demand.
type meter struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) *meter {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meter{t: t, reader: r, mp: mp}
}

// point is one data point: its attributes as k=v, sorted, and its value
// (a histogram's count).
type point struct {
	attrs string
	value float64
}

// collect returns every data point by instrument name.
func (m *meter) collect() map[string][]point {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			add := func(set attribute.Set, v float64) {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				sort.Strings(kv)
				out[mt.Name] = append(out[mt.Name], point{strings.Join(kv, ","), v})
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Count))
				}
			default:
				m.t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
		}
	}
	return out
}

// values renders an instrument's points as "attrs: value" lines, sorted.
func values(ps []point) string {
	var lines []string
	for _, p := range ps {
		lines = append(lines, fmt.Sprintf("%s: %g", p.attrs, p.value))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// wait polls cond until it holds.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %s", what, testTimeout)
		}
	}
}

type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (bytesCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }

// After a known workload every instrument holds what it did: publishes by
// stream and outcome, PutRecords calls and the entry sent again after a
// throttle, deliveries by handler and outcome and their durations, the
// leases taken, lost and held, and, once the stream is read and
// checkpointed, empty lanes, shards at the tip and nothing waiting for a
// checkpoint.
func TestMetricsAfterAKnownWorkload(t *testing.T) {
	ctx := testCtx(t)
	pubM, subM := newMeter(t), newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 2)
	store := lease.NewMemory()

	// Publishing: ten orders one after another (one call each), one refused
	// once for throttling (one more call, one retried entry), one with an
	// empty key (an error before any call).
	var throttled atomic.Bool
	srv.InjectPutFault(func(_, key string) error {
		if key == "c3" && throttled.CompareAndSwap(false, true) {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
		}
		return nil
	})
	pb := srv.NewBroker(runtime.WithMeterProvider(pubM.mp))
	connect(t, ctx, pb)
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
	for i := 1; i <= 10; i++ {
		if err := pub.Message(order{ID: i}).PartitionKey(fmt.Sprintf("c%d", i)).Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Message(order{ID: 11}).PartitionKey("").Publish(ctx); err == nil {
		t.Fatal("an empty key was published")
	}
	raw := srv.NewBroker(runtime.WithCodec(bytesCodec{}))
	connect(t, ctx, raw)
	if err := runtime.NewPublisher[[]byte](raw, runtime.PublisherSpec{Stream: "orders"}).Message([]byte("not json")).PartitionKey("c12").Publish(ctx); err != nil {
		t.Fatal(err)
	}

	// Handling from the start: order 3 retries once, order 4 is rejected,
	// the rest ack; the undecodable record never reaches the handler.
	var mu sync.Mutex
	handled := map[string]bool{}
	sb := srv.NewBroker(runtime.WithMeterProvider(subM.mp), runtime.WithLeaseStore(store), runtime.WithOwnerID("me"),
		runtime.WithLeaseRenewInterval(50*time.Millisecond), runtime.WithFailoverTime(time.Minute),
		runtime.WithCheckpointInterval(20*time.Millisecond))
	if _, err := runtime.Subscribe(sb, "orders", func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		handled[fmt.Sprintf("%d/%d", o.ID, d.Attempt)] = true
		mu.Unlock()
		switch {
		case o.ID == 3 && d.Attempt == 1:
			return runtime.Retry()
		case o.ID == 4:
			return runtime.Reject(errors.New("no such customer"))
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.HandlerName("shop.Post"), runtime.Workers(2)); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, sb)
	wait(t, "every order handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 11 })
	const st = "messaging.destination.name=orders"
	wait(t, "everything checkpointed", func() bool {
		ps := subM.collect()["kinesisgen.shard.checkpoint_age"]
		return len(ps) == 2 && ps[0].value == 0 && ps[1].value == 0
	})

	got := pubM.collect()
	for name, want := range map[string]string{
		"kinesisgen.publish.messages": "kinesisgen.outcome=error," + st + ": 1\n" +
			"kinesisgen.outcome=ok," + st + ": 10",
		"kinesisgen.putrecords.calls":           "kinesisgen.outcome=ok," + st + ": 11",
		"kinesisgen.putrecords.retried_entries": st + ": 1",
	} {
		if v := values(got[name]); v != want {
			t.Errorf("publisher's %s:\n%s\nwant:\n%s", name, v, want)
		}
	}
	got = subM.collect()
	h := "kinesisgen.handler=shop.Post,"
	shards := func(v string) string {
		return st + ",messaging.destination.partition.id=shardId-000000000000: " + v + "\n" +
			st + ",messaging.destination.partition.id=shardId-000000000001: " + v
	}
	for name, want := range map[string]string{
		"kinesisgen.handler.messages": h + "kinesisgen.outcome=ack," + st + ": 9\n" +
			h + "kinesisgen.outcome=reject," + st + ": 1\n" +
			h + "kinesisgen.outcome=retry," + st + ": 1\n" +
			h + "kinesisgen.outcome=undecodable," + st + ": 1",
		"kinesisgen.handler.duration": h + st + ": 11", // a count
		// The subscriber's own publish: order 3's retry copy.
		"kinesisgen.publish.messages":           "kinesisgen.outcome=ok," + st + ": 1",
		"kinesisgen.putrecords.calls":           "kinesisgen.outcome=ok," + st + ": 1",
		"kinesisgen.lane.queue_depth":           h + st + ": 0",
		"kinesisgen.shard.millis_behind_latest": shards("0"),
		"kinesisgen.shard.checkpoint_age":       shards("0"),
		"kinesisgen.shard.read_failures":        shards("0"),
		"kinesisgen.leases.held":                st + ": 2",
		"kinesisgen.leases.taken":               ": 2", // the instance's, over every subscription
		"kinesisgen.leases.lost":                ": 0",
	} {
		if v := values(got[name]); v != want {
			t.Errorf("subscriber's %s:\n%s\nwant:\n%s", name, v, want)
		}
	}

	// Another owner takes one lease behind this one's back: its next
	// renewal finds out, and the lease counts as lost.
	ls, err := store.List(ctx, runtime.DefaultApplication+"/orders")
	if err != nil || len(ls) != 2 {
		t.Fatalf("leases %v, %v", ls, err)
	}
	if _, err := store.Take(ctx, ls[0], "thief"); err != nil {
		t.Fatal(err)
	}
	wait(t, "the lease lost", func() bool { return values(subM.collect()["kinesisgen.leases.lost"]) == ": 1" })
	got = subM.collect()
	if v := values(got["kinesisgen.leases.held"]); v != st+": 1" {
		t.Errorf("leases held after the loss: %s", v)
	}
}

// A StartAll batch nobody waits for is counted all the same: its
// messages stored, and the one that failed before it was queued.
func TestStartAllIsCountedWithoutWait(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 1)
	b := srv.NewBroker(runtime.WithMeterProvider(m.mp))
	connect(t, ctx, b)
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"})
	runtime.StartAll(ctx, []*runtime.Message[order]{
		pub.Message(order{ID: 1}).PartitionKey("c1"),
		pub.Message(order{ID: 2}).PartitionKey(""),
		pub.Message(order{ID: 3}).PartitionKey("c3"),
	})
	const st = "messaging.destination.name=orders"
	want := "kinesisgen.outcome=error," + st + ": 1\n" + "kinesisgen.outcome=ok," + st + ": 2"
	wait(t, "the batch counted, no Wait called", func() bool { return values(m.collect()["kinesisgen.publish.messages"]) == want })
}

// While a handler is stuck on a backlog, the shard's reader reports how
// far behind the tip it is, and the shard's checkpoint age grows; once the
// handler goes on and the backlog is read, both are back at 0.
func TestRecordsBehindAndCheckpointAgeOfABacklog(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 1)
	pb := srv.NewBroker()
	connect(t, ctx, pb)
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
	// More than the shard hands out past a stuck record (256 for one
	// worker), so that its reader stops short of the tip.
	const total = 600
	orders := make([]order, total)
	for i := range orders {
		orders[i] = order{ID: i + 1}
	}
	if err := runtime.PublishAll(ctx, pub, orders); err != nil {
		t.Fatal(err)
	}
	const backlog = 600 * time.Millisecond
	time.Sleep(backlog)

	release := make(chan struct{})
	first := make(chan struct{})
	var n atomic.Int64
	sb := srv.NewBroker(runtime.WithMeterProvider(m.mp), runtime.WithCheckpointInterval(20*time.Millisecond))
	if _, err := runtime.Subscribe(sb, "orders", func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if n.Add(1) == 1 {
			close(first)
			<-release
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.BatchSize(100)); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, sb)
	<-first
	time.Sleep(300 * time.Millisecond)
	got := m.collect()
	behind, age, depth := got["kinesisgen.shard.millis_behind_latest"], got["kinesisgen.shard.checkpoint_age"], got["kinesisgen.lane.queue_depth"]
	if len(behind) != 1 || behind[0].value < float64(backlog.Milliseconds()) {
		t.Errorf("millis behind while stuck: %s; want at least %d", values(behind), backlog.Milliseconds())
	}
	if len(age) != 1 || age[0].value < 0.25 {
		t.Errorf("checkpoint age while stuck: %s; want at least 0.25 s", values(age))
	}
	if len(depth) != 1 || depth[0].value < 1 || depth[0].value > total {
		t.Errorf("lane queue depth while stuck: %s; want the records read meanwhile", values(depth))
	}
	close(release)
	wait(t, "the backlog read and checkpointed", func() bool {
		got := m.collect()
		b, a, d := got["kinesisgen.shard.millis_behind_latest"], got["kinesisgen.shard.checkpoint_age"], got["kinesisgen.lane.queue_depth"]
		return n.Load() == total && len(b) == 1 && b[0].value == 0 && len(a) == 1 && a[0].value == 0 && len(d) == 1 && d[0].value == 0
	})
}

func createStream(t *testing.T, ctx context.Context, srv *kinesistest.Server, name string, shards int32) {
	t.Helper()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatal(err)
	}
}

// An enhanced fan-out subscription's shards report how far behind the tip
// they are from the events' MillisBehindLatest: the gauge, which shows
// only shards whose reader has reported, holds the shard at the tip once
// its records are handled.
func TestRecordsBehindFromFanOutEvents(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 1)
	pb := srv.NewBroker()
	connect(t, ctx, pb)
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
	for i := 1; i <= 10; i++ {
		if err := pub.Publish(ctx, order{ID: i}); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int64
	sb := srv.NewBroker(runtime.WithMeterProvider(m.mp))
	if _, err := runtime.Subscribe(sb, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome {
		n.Add(1)
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.FanOut("metrics"), runtime.CreateIfMissing(1)); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, sb)
	wait(t, "the records handled", func() bool { return n.Load() == 10 })
	const want = "messaging.destination.name=orders,messaging.destination.partition.id=shardId-000000000000: 0"
	wait(t, "the shard's lag reported", func() bool {
		return values(m.collect()["kinesisgen.shard.millis_behind_latest"]) == want
	})
}

// A shard whose reads are refused (AccessDeniedException, after a change
// of permissions) shows it in kinesisgen.shard.read_failures, counting up
// while it lasts, next to a healthy shard at 0 whose records are handled
// meanwhile; once the permission is back the next read clears it, and
// what was published on the refused shard is handled.
func TestMetricsReadFailuresOfADeniedShard(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 2)
	const denied, healthy = "shardId-000000000000", "shardId-000000000001"
	var failing atomic.Bool
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if failing.Load() && c.Op == kinesistest.OpGetRecords && c.Stream == "orders" && c.Shard == denied {
			return &types.AccessDeniedException{Message: aws.String("not authorized to perform: kinesis:GetRecords")}
		}
		return nil
	})
	var mu sync.Mutex
	handled := map[int]bool{}
	sb := srv.NewBroker(runtime.WithMeterProvider(m.mp))
	if _, err := runtime.Subscribe(sb, "orders", func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		mu.Lock()
		handled[o.ID] = true
		mu.Unlock()
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, sb)
	pb := srv.NewBroker()
	connect(t, ctx, pb)
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
	// publish sends orders from..to-1 and returns their ids by shard.
	publish := func(from, to int) map[string][]int {
		byShard := map[string][]int{}
		for i := from; i < to; i++ {
			r, err := pub.Message(order{ID: i}).PartitionKey(fmt.Sprintf("c%d", i)).Send(ctx)
			if err != nil {
				t.Fatal(err)
			}
			byShard[r.ShardID] = append(byShard[r.ShardID], i)
		}
		if len(byShard[denied]) == 0 || len(byShard[healthy]) == 0 {
			t.Fatalf("orders by shard %v; want some on each", byShard)
		}
		return byShard
	}
	allHandled := func(ids []int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if !handled[id] {
				return false
			}
		}
		return true
	}
	// failures returns the gauge's value for each shard.
	failures := func() map[string]float64 {
		out := map[string]float64{}
		for _, p := range m.collect()["kinesisgen.shard.read_failures"] {
			switch p.attrs {
			case "messaging.destination.name=orders,messaging.destination.partition.id=" + denied:
				out[denied] = p.value
			case "messaging.destination.name=orders,messaging.destination.partition.id=" + healthy:
				out[healthy] = p.value
			default:
				t.Errorf("read_failures point with attributes %q", p.attrs)
			}
		}
		return out
	}

	before := publish(0, 10)
	wait(t, "the first orders handled", func() bool { return allHandled(before[denied]) && allHandled(before[healthy]) })
	if f := failures(); len(f) != 2 || f[denied] != 0 || f[healthy] != 0 {
		t.Errorf("read_failures while reads answer: %v; want 0 for both shards", f)
	}

	failing.Store(true)
	meanwhile := publish(10, 30)
	wait(t, "the refused shard's failed reads counted", func() bool { return failures()[denied] >= 2 })
	wait(t, "the healthy shard's orders handled meanwhile", func() bool { return allHandled(meanwhile[healthy]) })
	if f := failures(); len(f) != 2 || f[denied] < 2 || f[healthy] != 0 {
		t.Errorf("read_failures while %s is refused: %v; want at least 2 for it, 0 for %s", denied, f, healthy)
	}

	failing.Store(false)
	wait(t, "the refused shard's orders handled once its reads answer", func() bool { return allHandled(meanwhile[denied]) })
	wait(t, "the failures cleared", func() bool {
		f := failures()
		return len(f) == 2 && f[denied] == 0 && f[healthy] == 0
	})
}

// Another application's retry copy is counted as skipped by the
// application that did not make it, and is not handled there: billing
// retries order 1 once; audit handles orders 1 and 2 once each and skips
// billing's copy.
func TestMetricsSkippedRetryCopy(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 1)
	var billed atomic.Int32
	billing := srv.NewBroker(runtime.WithApplication("billing"))
	if _, err := runtime.Subscribe(billing, "orders", func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		billed.Add(1)
		if o.ID == 1 && d.Attempt == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, billing)
	audit := srv.NewBroker(runtime.WithApplication("audit"), runtime.WithMeterProvider(m.mp))
	if _, err := runtime.Subscribe(audit, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.HandlerName("audit.Log")); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, audit)
	pub := runtime.NewPublisher[order](billing, runtime.PublisherSpec{Stream: "orders"})
	for i := 1; i <= 2; i++ {
		if err := pub.Message(order{ID: i}).PartitionKey("c").Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const h, st = "kinesisgen.handler=audit.Log,", "messaging.destination.name=orders"
	want := h + "kinesisgen.outcome=ack," + st + ": 2\n" + h + "kinesisgen.outcome=skipped," + st + ": 1"
	wait(t, "billing's copy skipped by audit", func() bool {
		return billed.Load() == 3 && values(m.collect()["kinesisgen.handler.messages"]) == want
	})
	if v := values(m.collect()["kinesisgen.handler.duration"]); v != h+st+": 2" {
		t.Errorf("audit's handler.duration: %s, want 2 handlings", v)
	}
}

// Issue 32 item 7: after Shutdown (Run returned) the metrics stay readable
// until the meter provider shuts down, so a final flush at exit has them:
// the lease counters as they ended, and the subscription's gauges at their
// final values (no lease held, nothing queued).
func TestMetricsOutliveShutdown(t *testing.T) {
	ctx := testCtx(t)
	m := newMeter(t)
	srv := kinesistest.New()
	createStream(t, ctx, srv, "orders", 2)
	b := srv.NewBroker(runtime.WithMeterProvider(m.mp), runtime.WithLeaseStore(lease.NewMemory()))
	if _, err := runtime.Subscribe(b, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return runtime.Ack()
	}, runtime.HandlerName("shop.Post")); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, b)
	const st = "messaging.destination.name=orders"
	if v := values(m.collect()["kinesisgen.leases.held"]); v != st+": 2" {
		t.Fatalf("leases held while running: %q", v)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	got := m.collect()
	for name, want := range map[string]string{
		"kinesisgen.leases.taken":     ": 2",
		"kinesisgen.leases.lost":      ": 0",
		"kinesisgen.leases.held":      st + ": 0",
		"kinesisgen.lane.queue_depth": "kinesisgen.handler=shop.Post," + st + ": 0",
	} {
		if v := values(got[name]); v != want {
			t.Errorf("after Shutdown, %s:\n%s\nwant:\n%s", name, v, want)
		}
	}
}
