package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// testTimeout bounds every wait of these tests.
const testTimeout = 20 * time.Second

// env is one test's Kinesis (in process unless a live endpoint is used),
// lease store and captured logs.
type env struct {
	t      *testing.T
	api    kinesisapi.API
	store  lease.Store
	logs   *syncBuffer
	ctx    context.Context
	suffix string // makes stream names unique on a shared server
}

var streamSeq atomic.Int64

// stream is a stream name unique to this test run.
func (e *env) stream(base string) string { return base + e.suffix }

func newEnv(t *testing.T) *env {
	return newEnvWith(t, kinesistest.New(kinesistest.WithLongPoll(time.Second)))
}

func newEnvWith(t *testing.T, api kinesisapi.API) *env {
	return newEnvWithin(t, api, testTimeout)
}

// newEnvWithin is newEnvWith with its own bound on every wait, for a server
// slower than kinesalite.
func newEnvWithin(t *testing.T, api kinesisapi.API, timeout time.Duration) *env {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	suffix := fmt.Sprintf("-%d-%d", time.Now().UnixNano(), streamSeq.Add(1))
	return &env{t: t, api: api, store: lease.NewMemory(), logs: &syncBuffer{}, ctx: ctx, suffix: suffix}
}

// broker is a broker on the env's Kinesis and lease store, with intervals
// short enough for tests. Leases expire only after a minute, so a second
// broker gets a shard at once only if the first released it.
func (e *env) broker(opts ...runtime.Option) *runtime.Broker {
	base := []runtime.Option{
		runtime.WithKinesisClient(e.api),
		runtime.WithLeaseStore(e.store),
		runtime.WithLogger(slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		runtime.WithShardSyncInterval(200 * time.Millisecond),
		runtime.WithLeaseRenewInterval(100 * time.Millisecond),
		runtime.WithFailoverTime(time.Minute),
		runtime.WithCheckpointInterval(50 * time.Millisecond),
		runtime.WithShutdownTimeout(5 * time.Second),
	}
	return runtime.NewBroker(append(base, opts...)...)
}

// subscribe is runtime.Subscribe polling as often as the service allows, so
// that tests on a live server (no long poll) wait little; opts override it.
func subscribe[M any](e *env, b *runtime.Broker, stream string, h runtime.Handler[M], opts ...runtime.SubscribeOption) (*runtime.Subscription, error) {
	return runtime.Subscribe(b, stream, h, append([]runtime.SubscribeOption{runtime.PollInterval(runtime.MinPollInterval)}, opts...)...)
}

// mustSubscribe is subscribe, ending the test if it fails.
func mustSubscribe[M any](e *env, b *runtime.Broker, stream string, h runtime.Handler[M], opts ...runtime.SubscribeOption) *runtime.Subscription {
	e.t.Helper()
	sub, err := subscribe(e, b, stream, h, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return sub
}

func (e *env) connect(b *runtime.Broker) {
	e.t.Helper()
	if err := b.Connect(e.ctx); err != nil {
		e.t.Fatalf("Connect: %v", err)
	}
	e.t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
}

func (e *env) createStream(name string, shards int32) {
	e.t.Helper()
	if _, err := e.api.CreateStream(e.ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		e.t.Fatalf("CreateStream %s: %v", name, err)
	}
	waitActive(e.ctx, e.t, e.api, name, "") // a live server creates streams asynchronously
}

// newStream creates a stream of shards named after base (made unique to
// the test, as by stream) and returns its name.
func (e *env) newStream(base string, shards int32) string {
	e.t.Helper()
	name := e.stream(base)
	e.createStream(name, shards)
	return name
}

// publisher is a connected broker that only publishes.
func (e *env) publisher(stream string) runtime.Publisher[order] {
	b := e.broker()
	e.connect(b)
	return runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: stream})
}

func (e *env) publish(p runtime.Publisher[order], o order) {
	e.t.Helper()
	if err := p.Message(o).PartitionKey(o.Customer).Publish(e.ctx); err != nil {
		e.t.Fatalf("publish %+v: %v", o, err)
	}
}

// publishRange publishes orders from..to-1 one after another, order i
// under a customer of its own, c<i>.
func (e *env) publishRange(p runtime.Publisher[order], from, to int) {
	e.t.Helper()
	for i := from; i < to; i++ {
		e.publish(p, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
	}
}

// leases returns the stream's leases as the store has them.
func (e *env) leases(stream string) []lease.Lease {
	e.t.Helper()
	ls, err := e.store.List(e.ctx, runtime.DefaultApplication+"/"+stream)
	if err != nil {
		e.t.Fatal(err)
	}
	return ls
}

// receive waits for n values from ch.
func receive[T any](e *env, ch <-chan T, n int) []T {
	e.t.Helper()
	out := make([]T, 0, n)
	for len(out) < n {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-e.ctx.Done():
			e.t.Fatalf("received %d of %d: %v; received: %+v", len(out), n, e.ctx.Err(), out)
		}
	}
	return out
}

type delivered struct {
	order order
	d     runtime.Delivery
}

// collect is a handler that acks and reports every delivery on the returned channel.
func collect() (runtime.Handler[order], <-chan delivered) {
	ch := make(chan delivered, 1024)
	return func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		ch <- delivered{o, d}
		return runtime.Ack()
	}, ch
}

func ids(ds []delivered) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.order.ID
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// line returns the first log line with msg, or "".
func (s *syncBuffer) line(msg string) string {
	for l := range strings.SplitSeq(s.String(), "\n") {
		if strings.Contains(l, `"msg":"`+msg) {
			return l
		}
	}
	return ""
}

type gauge struct{ now, max atomic.Int64 }

func (g *gauge) enter() {
	n := g.now.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
}
func (g *gauge) leave() { g.now.Add(-1) }

// The order service of examples/orders, in small: a 2-shard stream created if
// missing, four lanes by key, many customers. Every customer's orders are
// handled in the order they were published, while the lanes run in parallel.
func TestOrderServiceKeepsEachCustomersOrderAcrossParallelLanes(t *testing.T) {
	testOrderServiceKeepsEachCustomersOrderAcrossParallelLanes(newEnv(t))
}

func testOrderServiceKeepsEachCustomersOrderAcrossParallelLanes(e *env) {
	t := e.t
	const customers, perCustomer = 40, 25
	stream := e.stream("customer-orders")
	var (
		mu  sync.Mutex
		got = map[string][]int{}
		g   gauge
	)
	all := make(chan runtime.Delivery, customers*perCustomer)
	b := e.broker()
	mustSubscribe(e, b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		g.enter()
		defer g.leave()
		time.Sleep(200 * time.Microsecond) // a journal write
		mu.Lock()
		got[o.Customer] = append(got[o.Customer], o.ID)
		mu.Unlock()
		all <- d
		return runtime.Ack()
	}, runtime.CreateIfMissing(2), runtime.Workers(4), runtime.ByKey(), runtime.PollInterval(runtime.MinPollInterval))
	e.connect(b) // creates the stream, then reads it from its tip

	out, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil || len(out.Shards) != 2 {
		t.Fatalf("ListShards after Connect: %d shards, %v; want the stream created with 2", len(out.Shards), err)
	}

	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: stream})
	var wg sync.WaitGroup
	for c := range customers {
		wg.Go(func() {
			for i := range perCustomer {
				e.publish(p, order{ID: i, Customer: fmt.Sprintf("customer-%d", c)})
			}
		})
	}
	wg.Wait()

	shards := map[string]bool{}
	for _, d := range receive(e, all, customers*perCustomer) {
		shards[d.ShardID] = true
		if d.Stream != stream || d.SequenceNumber == "" || d.ArrivalTime.IsZero() || d.Attempt != 1 {
			t.Fatalf("delivery metadata incomplete: %+v", d)
		}
		if d.Headers()[runtime.PartitionKeyHeader] != d.PartitionKey || !strings.HasPrefix(d.PartitionKey, "customer-") {
			t.Fatalf("partition key %q, header %q", d.PartitionKey, d.Headers()[runtime.PartitionKeyHeader])
		}
	}
	if len(shards) != 2 {
		t.Fatalf("deliveries came from %d shards, want both", len(shards))
	}
	mu.Lock()
	defer mu.Unlock()
	for c, ids := range got {
		if !slices.IsSorted(ids) || len(ids) != perCustomer {
			t.Fatalf("%s: orders handled as %v, want 0..%d in order", c, ids, perCustomer-1)
		}
	}
	if g.max.Load() < 2 {
		t.Fatalf("at most %d orders were handled at once; the 4 lanes should overlap", g.max.Load())
	}
	t.Logf("max concurrency %d", g.max.Load())
}

// Plain workers=4 runs deliveries of one key side by side, so they can
// finish out of order: order 0 waits for order 1 to be handled.
func TestPlainWorkersCanReorderOneKey(t *testing.T) { testPlainWorkersCanReorderOneKey(newEnv(t)) }

func testPlainWorkersCanReorderOneKey(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	secondDone := make(chan struct{})
	finished := make(chan int, 2)
	b := e.broker()
	mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if o.ID == 0 {
			select {
			case <-secondDone:
			case <-time.After(5 * time.Second):
			}
		}
		finished <- o.ID
		if o.ID == 1 {
			close(secondDone)
		}
		return runtime.Ack()
	}, runtime.Workers(4))
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	e.publish(p, order{ID: 0, Customer: "alice"})
	e.publish(p, order{ID: 1, Customer: "alice"})
	if got := receive(e, finished, 2); !slices.Equal(got, []int{1, 0}) {
		t.Fatalf("finished %v, want [1 0]: plain workers should run one key's orders at once", got)
	}
}

// A new broker on the same lease store resumes after the checkpoint of the
// one that stopped: nothing it handled is delivered again.
func TestResumeFromCheckpointAfterRestart(t *testing.T) {
	testResumeFromCheckpointAfterRestart(newEnv(t))
}

func testResumeFromCheckpointAfterRestart(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	pub := e.publisher(orders)

	h1, ch1 := collect()
	b1 := e.broker(runtime.WithOwnerID("first"))
	mustSubscribe(e, b1, orders, h1, runtime.StartAt(runtime.Horizon()))
	e.connect(b1)
	e.publishRange(pub, 0, 20)
	receive(e, ch1, 20)
	if err := b1.Shutdown(e.ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	e.publishRange(pub, 20, 30)
	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	// One worker: each shard's records are handled in shard order, so once
	// every new record has arrived, an old one would have arrived before it.
	got := receive(e, ch2, 10)
	shards := map[string]bool{}
	for _, d := range got {
		shards[d.d.ShardID] = true
	}
	if g := ids(got); slices.Min(g) < 20 {
		t.Fatalf("after restart got %v: records handled before the restart came again", g)
	}
	if len(shards) != 2 {
		t.Fatalf("new records landed on %d shards; the test needs both", len(shards))
	}
}

// A record whose handler never finishes is not checkpointed: the next owner
// gets it again, with everything after it on its shard.
func TestUnacknowledgedRecordIsRedelivered(t *testing.T) {
	testUnacknowledgedRecordIsRedelivered(newEnv(t))
}

func testUnacknowledgedRecordIsRedelivered(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	pub := e.publisher(orders)

	stuck := make(chan struct{})
	handled := make(chan int, 16)
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond))
	mustSubscribe(e, b1, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if o.ID == 3 {
			close(stuck)
			<-ctx.Done() // cancelled when the shutdown timeout ends
			return runtime.Ack()
		}
		handled <- o.ID
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b1)
	for i := range 6 {
		e.publish(pub, order{ID: i, Customer: "alice"})
	}
	if got := receive(e, handled, 3); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("handled %v", got)
	}
	<-stuck
	_ = b1.Shutdown(e.ctx) // times out waiting for order 3

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	if got := ids(receive(e, ch2, 3)); !slices.Equal(got, []int{3, 4, 5}) {
		t.Fatalf("second owner got %v, want [3 4 5]: the unsettled record and what follows it", got)
	}
}

// Retry publishes a copy at the tip with the attempt counted up, keeping the
// key and headers; the original is settled.
func TestRetryPublishesCopiesWithAttemptCount(t *testing.T) {
	testRetryPublishesCopiesWithAttemptCount(newEnv(t))
}

func testRetryPublishesCopiesWithAttemptCount(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	seen := make(chan runtime.Delivery, 8)
	b := e.broker()
	sub := mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		if d.Attempt < 3 {
			return runtime.OutcomeOf(errors.New("warehouse busy"))
		}
		return runtime.Ack()
	}, runtime.MaxRetries(5))
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	if err := p.Message(order{ID: 7, Customer: "alice"}).PartitionKey("alice").Header("trace", "t-1").Publish(e.ctx); err != nil {
		t.Fatal(err)
	}
	got := receive(e, seen, 3)
	for i, d := range got {
		if d.Attempt != i+1 {
			t.Fatalf("delivery %d has attempt %d", i, d.Attempt)
		}
		if d.PartitionKey != "alice" || d.Headers()["trace"] != "t-1" {
			t.Fatalf("retry copy lost its key or headers: %+v", d)
		}
		if _, ok := d.Header(runtime.AttemptHeader); ok {
			t.Fatalf("the attempt header shows among the user headers: %v", d.Headers())
		}
		if v, _ := d.Header("trace"); v != "t-1" {
			t.Fatalf("Header(trace) = %q", v)
		}
		if i > 0 && d.SequenceNumber <= got[i-1].SequenceNumber {
			t.Fatalf("copy %d is not at the tip: %s after %s", i, d.SequenceNumber, got[i-1].SequenceNumber)
		}
	}
	// Stopping checkpoints past the original and both copies.
	if err := sub.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	ls := e.leases(orders)
	if len(ls) != 1 || ls[0].Checkpoint != got[2].SequenceNumber {
		t.Fatalf("leases after stop: %+v; want the checkpoint at the last copy %s", ls, got[2].SequenceNumber)
	}
}

func TestDeadLetterCarriesReasonAndOrigin(t *testing.T) {
	testDeadLetterCarriesReasonAndOrigin(newEnv(t))
}

func testDeadLetterCarriesReasonAndOrigin(e *env) {
	t := e.t
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	attempts := make(chan runtime.Delivery, 8)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		attempts <- d
		if o.ID == 1 {
			return runtime.Reject(errors.New("unknown customer"))
		}
		return runtime.OutcomeOf(errors.New("db down"))
	}, runtime.MaxRetries(2), runtime.DeadLetter(dlq))
	dead, deadCh := collect()
	mustSubscribe(e, b, dlq, dead)
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	if err := p.Message(order{ID: 0, Customer: "alice"}).PartitionKey("alice").Header("trace", "t-0").Publish(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.publish(p, order{ID: 1, Customer: "bob"})

	tries := map[int][]runtime.Delivery{}
	for _, d := range receive(e, attempts, 4) { // order 0: 1 + 2 retries; order 1: once
		var o int
		if d.PartitionKey == "bob" {
			o = 1
		}
		tries[o] = append(tries[o], d)
	}
	if len(tries[0]) != 3 || tries[0][2].Attempt != 3 {
		t.Fatalf("order 0 was tried %d times", len(tries[0]))
	}

	dl := map[int]delivered{}
	for _, d := range receive(e, deadCh, 2) {
		dl[d.order.ID] = d
	}
	for id, want := range map[int]struct {
		reason   string
		attempts string
		origin   runtime.Delivery
	}{
		0: {"gave up after 3 attempts: db down", "3", tries[0][2]},
		1: {"unknown customer", "1", tries[1][0]},
	} {
		d, ok := dl[id]
		if !ok {
			t.Fatalf("order %d did not reach the dead-letter stream", id)
		}
		h := d.d.Headers()
		if h[runtime.DeadLetterReasonHeader] != want.reason ||
			h[runtime.OriginStreamHeader] != orders ||
			h[runtime.OriginShardHeader] != want.origin.ShardID ||
			h[runtime.OriginSequenceHeader] != want.origin.SequenceNumber ||
			h[runtime.OriginAttemptsHeader] != want.attempts {
			t.Fatalf("dead letter of order %d has headers %v; want reason %q and origin %s/%s", id, h, want.reason, want.origin.ShardID, want.origin.SequenceNumber)
		}
		if d.d.Attempt != 1 || d.d.PartitionKey != want.origin.PartitionKey {
			t.Fatalf("dead letter of order %d: attempt %d, key %q", id, d.d.Attempt, d.d.PartitionKey)
		}
	}
	if dl[0].d.Headers()["trace"] != "t-0" {
		t.Fatalf("dead letter lost the user headers: %v", dl[0].d.Headers())
	}
}

func TestRejectWithoutDeadLetterLogsAndCheckpoints(t *testing.T) {
	testRejectWithoutDeadLetterLogsAndCheckpoints(newEnv(t))
}

func testRejectWithoutDeadLetterLogsAndCheckpoints(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	seen := make(chan runtime.Delivery, 2)
	b := e.broker()
	sub := mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		return runtime.Reject(errors.New("malformed order"))
	})
	e.connect(b)
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}), order{ID: 1, Customer: "alice"})
	d := receive(e, seen, 1)[0]
	if err := sub.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	line := e.logs.line("record rejected")
	for _, want := range []string{`"stream":"` + orders + `"`, `"shard":"` + d.ShardID, `"sequence":"` + d.SequenceNumber, "malformed order"} {
		if !strings.Contains(line, want) {
			t.Fatalf("rejection log %q lacks %s", line, want)
		}
	}
	if ls := e.leases(orders); len(ls) != 1 || ls[0].Checkpoint != d.SequenceNumber {
		t.Fatalf("leases %+v: the rejected record should be checkpointed past", ls)
	}
}

// Records that do not decode never reach the handler as a zero value: they
// are rejected to the dead-letter stream with their payload as it was.
func TestUndecodableRecordsAreRejected(t *testing.T) { testUndecodableRecordsAreRejected(newEnv(t)) }

func testUndecodableRecordsAreRejected(e *env) {
	t := e.t
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	h, ch := collect()
	b := e.broker()
	mustSubscribe(e, b, orders, h, runtime.DeadLetter(dlq))
	// The dead letters did not decode as orders: a RawRecord reader of the
	// same broker reads them, with their bytes, key, reason and origin.
	letters := make(chan runtime.RawRecord, 4)
	mustSubscribe(e, b, dlq, func(_ context.Context, rec runtime.RawRecord, d runtime.Delivery) runtime.Outcome {
		if rec.PartitionKey != d.PartitionKey {
			t.Errorf("RawRecord key %q, delivery key %q", rec.PartitionKey, d.PartitionKey)
		}
		letters <- rec
		return runtime.Ack()
	})
	e.connect(b)

	bad := [][]byte{
		[]byte("not json {"),
		{0xFE, 'k', 'g', 'E', 9, 0}, // an envelope of an unknown version
	}
	for _, data := range bad {
		if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("alice"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}), order{ID: 9, Customer: "alice"})

	// Same key, one shard, one worker: the good record comes after the bad ones.
	if got := receive(e, ch, 1)[0]; got.order.ID != 9 {
		t.Fatalf("handler got %+v, want only order 9", got.order)
	}
	select {
	case extra := <-ch:
		t.Fatalf("handler got an undecodable record as %+v", extra.order)
	default:
	}
	for i, rec := range receive(e, letters, 2) {
		if !bytes.Equal(rec.Data, bad[i]) || rec.PartitionKey != "alice" {
			t.Fatalf("dead letter %d: %q under %q, want the original %q under alice", i, rec.Data, rec.PartitionKey, bad[i])
		}
		dl, ok := rec.DeadLetter()
		if !ok || !strings.Contains(dl.Reason, "decode") || dl.Stream != orders || dl.ShardID == "" || dl.SequenceNumber == "" || dl.Attempts != 1 {
			t.Fatalf("dead letter %d says %+v (ok %v); want a decode reason and its origin on %s", i, dl, ok, orders)
		}
	}
}

// A panicking handler does not stop the service: the panic is logged with
// its stack and the record retried.
func TestPanickingHandlerIsRetried(t *testing.T) { testPanickingHandlerIsRetried(newEnv(t)) }

func testPanickingHandlerIsRetried(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	attempts := make(chan int, 4)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		attempts <- d.Attempt
		if d.Attempt == 1 {
			panic("inventory index out of range")
		}
		return runtime.Ack()
	})
	e.connect(b)
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}), order{ID: 1, Customer: "alice"})
	if got := receive(e, attempts, 2); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("attempts %v, want [1 2]", got)
	}
	line := e.logs.line("handler panicked")
	if !strings.Contains(line, "inventory index out of range") || !strings.Contains(line, "goroutine ") {
		t.Fatalf("panic log %q lacks the panic value or the stack", line)
	}
}

func TestSeekToHorizonReplaysAndSeekAfterShutdownFails(t *testing.T) {
	testSeekToHorizonReplaysAndSeekAfterShutdownFails(newEnv(t))
}

func testSeekToHorizonReplaysAndSeekAfterShutdownFails(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	h, ch := collect()
	b := e.broker()
	sub := mustSubscribe(e, b, orders, h)
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	for i := range 5 {
		e.publish(p, order{ID: i, Customer: "alice"})
	}
	if got := ids(receive(e, ch, 5)); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("got %v", got)
	}
	if err := sub.Seek(e.ctx, runtime.Horizon()); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	if got := ids(receive(e, ch, 5)); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("after seeking to the horizon got %v", got)
	}

	if err := b.Shutdown(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Seek(e.ctx, runtime.Horizon()); !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("Seek after Shutdown = %v, want ErrNotConnected", err)
	}
	select {
	case <-sub.Done():
	case <-e.ctx.Done():
		t.Fatal("Done not closed after Shutdown")
	}
}

// Graceful stops that land mid-drain, with every lane full and readers
// waiting in the middle of a run, neither lose nor repeat a record: what
// the lanes took is a prefix of each run, handled and checkpointed before
// the lease goes; the rest is read by the next broker. Each key stays in
// order across the restarts.
func TestGracefulStopsMidDrainNeitherLoseNorRepeat(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 2)
	const n, keys = 6000, 40
	entries := make([]types.PutRecordsRequestEntry, 0, 500)
	for i := range n {
		c := fmt.Sprintf("customer-%d", i%keys)
		data, _ := json.Marshal(order{ID: i, Customer: c})
		entries = append(entries, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(c)})
		if len(entries) == cap(entries) {
			if _, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: aws.String(orders), Records: entries}); err != nil {
				t.Fatal(err)
			}
			entries = entries[:0]
		}
	}
	var (
		mu    sync.Mutex
		times = make(map[int]int, n)
		seen  = map[string][]int{}
	)
	handle := func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		time.Sleep(20 * time.Microsecond) // slow enough that the lanes fill up
		mu.Lock()
		times[o.ID]++
		seen[o.Customer] = append(seen[o.Customer], o.ID)
		mu.Unlock()
		return runtime.Ack()
	}
	handled := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(times)
	}
	stops := 0
	for handled() < n {
		if stops == 200 {
			t.Fatalf("%d of %d records handled after %d restarts", handled(), n, stops)
		}
		b := e.broker()
		mustSubscribe(e, b, orders, handle, runtime.StartAt(runtime.Horizon()), runtime.Workers(8), runtime.ByKey())
		if err := b.Connect(e.ctx); err != nil {
			t.Fatalf("Connect: %v", err)
		}
		time.Sleep(time.Duration(5+stops%4*5) * time.Millisecond)
		if err := b.Shutdown(e.ctx); err != nil {
			t.Fatalf("Shutdown %d: %v", stops, err)
		}
		stops++
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range times {
		if k != 1 {
			t.Fatalf("order %d handled %d times across %d graceful stops", id, k, stops)
		}
	}
	for c, ids := range seen {
		if !slices.IsSorted(ids) {
			t.Fatalf("%s handled out of order across restarts: %v", c, ids)
		}
	}
	t.Logf("%d records over %d graceful stops, each handled once", n, stops)
}

// Shutdown releases the leases, so a second broker takes every shard at
// once rather than after the failover time (a minute here).
func TestShutdownReleasesLeasesForTheNextBroker(t *testing.T) {
	testShutdownReleasesLeasesForTheNextBroker(newEnv(t))
}

func testShutdownReleasesLeasesForTheNextBroker(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	b1 := e.broker(runtime.WithOwnerID("first"))
	h1, _ := collect()
	mustSubscribe(e, b1, orders, h1)
	e.connect(b1)
	for _, l := range e.leases(orders) {
		if l.Owner != "first" {
			t.Fatalf("lease %s owned by %q after the first Connect", l.ShardID, l.Owner)
		}
	}
	if err := b1.Shutdown(e.ctx); err != nil {
		t.Fatal(err)
	}
	ls := e.leases(orders)
	if len(ls) != 2 {
		t.Fatalf("%d leases, want 2", len(ls))
	}
	for _, l := range ls {
		if l.Owner != "" {
			t.Fatalf("lease %s still owned by %q after Shutdown", l.ShardID, l.Owner)
		}
	}

	start := time.Now()
	b2 := e.broker(runtime.WithOwnerID("second"))
	h2, ch2 := collect()
	mustSubscribe(e, b2, orders, h2)
	e.connect(b2)
	for _, l := range e.leases(orders) {
		if l.Owner != "second" {
			t.Fatalf("lease %s owned by %q right after the second Connect", l.ShardID, l.Owner)
		}
	}
	// Records published after Connect returned are read.
	pub := e.publisher(orders)
	e.publishRange(pub, 0, 10)
	receive(e, ch2, 10)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the second broker took %v", d)
	}
}

func TestSubscribeTwiceAfterConnectIsRefused(t *testing.T) {
	testSubscribeTwiceAfterConnectIsRefused(newEnv(t))
}

func testSubscribeTwiceAfterConnectIsRefused(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	b := e.broker()
	e.connect(b)
	h, _ := collect()
	mustSubscribe(e, b, orders, h)
	_, err := subscribe(e, b, orders, h)
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("second Subscribe = %v, want ErrInvalid", err)
	}
	// Issue 32 item 3: the error says what to do instead.
	for _, want := range []string{"one subscription per stream per broker", "another broker", "WithApplication"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second Subscribe's error %q does not say %q", err, want)
		}
	}
}

func TestCreateIfMissingAfterConnect(t *testing.T) { testCreateIfMissingAfterConnect(newEnv(t)) }

func testCreateIfMissingAfterConnect(e *env) {
	t := e.t
	fresh := e.stream("fresh")
	b := e.broker()
	e.connect(b)
	h, ch := collect()
	mustSubscribe(e, b, fresh, h, runtime.CreateIfMissing(3))
	out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(fresh)})
	if err != nil || aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount) != 3 {
		t.Fatalf("DescribeStreamSummary: %+v, %v", out, err)
	}
	// Subscribe returned with every first iterator: a record published now is read.
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: fresh}), order{ID: 1, Customer: "alice"})
	receive(e, ch, 1)
}

// A missing dead-letter stream is an ErrStream error, before anything is
// read; with create_if_missing it is created (one shard) and receives the
// records handlers give up.
func TestMissingDeadLetterStream(t *testing.T) { testMissingDeadLetterStream(newEnv(t)) }

func testMissingDeadLetterStream(e *env) {
	t := e.t
	orders, dlq := e.stream("orders"), e.stream("orders-dlq")
	e.createStream(orders, 1)
	reject := func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return runtime.Reject(errors.New("no"))
	}
	b := e.broker()
	e.connect(b)
	if _, err := subscribe(e, b, orders, reject, runtime.DeadLetter(dlq)); !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Subscribe with a missing dead-letter stream = %v, want ErrStream", err)
	}
	if _, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(dlq)}); err == nil {
		t.Fatal("the dead-letter stream was created without create_if_missing")
	}

	if _, err := subscribe(e, b, orders, reject, runtime.DeadLetter(dlq), runtime.CreateIfMissing(1)); err != nil {
		t.Fatalf("Subscribe with create_if_missing: %v", err)
	}
	out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(dlq)})
	if err != nil || aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount) != 1 {
		t.Fatalf("dead-letter stream: %+v, %v; want it created with one shard", out, err)
	}
	h, letters := collect()
	mustSubscribe(e, b, dlq, h, runtime.StartAt(runtime.Horizon()))
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}), order{ID: 7, Customer: "alice"})
	if got := receive(e, letters, 1); got[0].order.ID != 7 {
		t.Fatalf("dead letter %+v, want order 7", got[0].order)
	}
}

type receipt struct {
	Order int `json:"order"`
}

// A reply goes through the reply publisher's key ladder: the mount-site key.
func TestReplyOutcomePublishesTheReply(t *testing.T) { testReplyOutcomePublishesTheReply(newEnv(t)) }

func testReplyOutcomePublishesTheReply(e *env) {
	t := e.t
	orders, receiptStream := e.newStream("orders", 1), e.newStream("receipts", 2)
	b := e.broker()
	receipts := runtime.NewPublisher[receipt](b, runtime.PublisherSpec{Stream: receiptStream}, runtime.WithPartitionKey("receipts"))
	mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		return runtime.ReplyOutcome(ctx, receipts, receipt{Order: o.ID}, nil)
	})
	got := make(chan runtime.Delivery, 8)
	ids := make(chan int, 8)
	mustSubscribe(e, b, receiptStream, func(_ context.Context, r receipt, d runtime.Delivery) runtime.Outcome {
		got <- d
		ids <- r.Order
		return runtime.Ack()
	})
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	e.publishRange(p, 0, 3)
	for _, d := range receive(e, got, 3) {
		if d.PartitionKey != "receipts" {
			t.Fatalf("receipt published under key %q, want the mount-site key", d.PartitionKey)
		}
	}
	if got := receive(e, ids, 3); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("receipts %v, want one per order, in order", got)
	}

	if o := runtime.ReplyOutcome(e.ctx, receipts, receipt{}, errors.New("no stock")); o.String() != "retry" || o.Err() == nil {
		t.Fatalf("ReplyOutcome with a handler error = %v, want a retry", o)
	}
}

// A retry copy that cannot be published keeps the original unsettled: after
// a restart the original is delivered again, nothing is lost.
func TestRetryCopyThatFailsToPublishKeepsTheOriginal(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)

	// The first put (the original) goes through; every retry copy is refused.
	refused := refuseCopies(srv, orders, &types.InternalFailureException{Message: aws.String("injected")})

	first := make(chan runtime.Delivery, 4)
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond))
	mustSubscribe(e, b1, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		first <- d
		return runtime.Retry()
	})
	e.connect(b1)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	orig := receive(e, first, 1)[0]
	receive(e, refused, 2) // the copy is refused, and tried again...
	_ = b1.Shutdown(e.ctx) // ...until the broker stops
	srv.InjectPutFault(nil)
	select {
	case d := <-first:
		t.Fatalf("a copy was delivered although none was published: %+v", d)
	default:
	}

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	got := receive(e, ch2, 1)[0]
	if got.d.SequenceNumber != orig.SequenceNumber || got.d.Attempt != 1 {
		t.Fatalf("after restart got %+v, want the original %s again", got.d, orig.SequenceNumber)
	}
}

// Splitting and merging shards while the service reads keeps every
// customer's order: a child is read only after its parents.
func TestSplitAndMergeDuringConsumptionKeepEachKeysOrder(t *testing.T) {
	testSplitAndMerge(newEnv(t))
}

func testSplitAndMerge(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	const customers, rounds, perRound = 30, 3, 10
	var (
		mu  sync.Mutex
		got = map[string][]int{}
	)
	all := make(chan struct{}, customers*rounds*perRound)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		got[o.Customer] = append(got[o.Customer], o.ID)
		mu.Unlock()
		all <- struct{}{}
		return runtime.Ack()
	}, runtime.Workers(4), runtime.ByKey())
	e.connect(b)
	pub := e.publisher(orders)
	publishRound := func(r int) {
		var wg sync.WaitGroup
		for c := range customers {
			wg.Go(func() {
				for i := range perRound {
					e.publish(pub, order{ID: r*perRound + i, Customer: fmt.Sprintf("c%d", c)})
				}
			})
		}
		wg.Wait()
	}
	openShards := func() []types.Shard {
		out, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: aws.String(orders)})
		if err != nil {
			t.Fatal(err)
		}
		var open []types.Shard
		for _, s := range out.Shards {
			if s.SequenceNumberRange.EndingSequenceNumber == nil {
				open = append(open, s)
			}
		}
		return open
	}

	publishRound(0)
	// Split the first shard at the middle of its hash range.
	s0 := openShards()[0]
	lo, _ := new(big.Int).SetString(*s0.HashKeyRange.StartingHashKey, 10)
	hi, _ := new(big.Int).SetString(*s0.HashKeyRange.EndingHashKey, 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: aws.String(orders), ShardToSplit: s0.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	publishRound(1)
	// Merge the two lowest open shards (adjacent by hash range).
	open := openShards()
	slices.SortFunc(open, func(a, b types.Shard) int {
		x, _ := new(big.Int).SetString(*a.HashKeyRange.StartingHashKey, 10)
		y, _ := new(big.Int).SetString(*b.HashKeyRange.StartingHashKey, 10)
		return x.Cmp(y)
	})
	if _, err := e.api.MergeShards(e.ctx, &kinesis.MergeShardsInput{StreamName: aws.String(orders), ShardToMerge: open[0].ShardId, AdjacentShardToMerge: open[1].ShardId}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	publishRound(2)

	receive(e, all, customers*rounds*perRound)
	mu.Lock()
	defer mu.Unlock()
	for c, ids := range got {
		if len(ids) != rounds*perRound || !slices.IsSorted(ids) {
			t.Fatalf("%s: handled %v, want 0..%d in order across the split and merge", c, ids, rounds*perRound-1)
		}
	}
}

// A handler that does not keep up pauses its shard's reader: the records in
// flight stay bounded (a lane's queue plus one read), however large the
// backlog.
func TestSlowHandlerPausesTheReader(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)
	pub := e.publisher(orders)
	for i := range 2000 {
		e.publish(pub, order{ID: i, Customer: "alice"})
	}

	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	b := e.broker()
	mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.BatchSize(10))
	e.connect(b)
	defer close(release)
	<-entered
	// Give an unbounded reader time to run ahead: it would read all 200
	// batches of 10 in far less than this. A bounded one stops at the
	// queue's 257 records, the one being handled and one read.
	time.Sleep(300 * time.Millisecond)
	stats, _ := srv.ShardStats(orders, "shardId-000000000000")
	if read := stats.GetRecords * 10; read > 300 {
		t.Fatalf("the reader fetched about %d records while the handler was stuck on the first", read)
	}
}

// Start at a time and seek to one shard's sequence number.
func TestStartAtTimeAndSeekToSequence(t *testing.T) { testStartAtTimeAndSeekToSequence(newEnv(t)) }

func testStartAtTimeAndSeekToSequence(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	pub := e.publisher(orders)
	e.publishRange(pub, 0, 4)
	time.Sleep(5 * time.Millisecond) // arrival times may be kept to the millisecond
	from := time.Now()
	time.Sleep(5 * time.Millisecond)
	e.publishRange(pub, 4, 8)

	h, ch := collect()
	b := e.broker()
	sub := mustSubscribe(e, b, orders, h, runtime.StartAt(runtime.AtTime(from)))
	e.connect(b)
	t.Cleanup(func() { // before the broker's shutdown: what each shard was doing
		if t.Failed() {
			t.Logf("from %v; status at the failure: %+v", from, b.Status())
		}
	})
	got := receive(e, ch, 4)
	gotIDs := ids(got)
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, []int{4, 5, 6, 7}) {
		t.Fatalf("from %v got %v, want the 4 records published after it", from, gotIDs)
	}

	// Seek one shard back to the first of its records read: it and what
	// follows on that shard come again, in order (one worker).
	target := got[0].d
	if err := sub.Seek(e.ctx, runtime.AtSequence(target.ShardID, target.SequenceNumber)); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	var want []int
	for _, d := range got {
		if d.d.ShardID == target.ShardID {
			want = append(want, d.order.ID)
		}
	}
	again := ids(receive(e, ch, len(want)))
	if !slices.Equal(again, want) {
		t.Fatalf("after seeking to %s/%s got %v, want %v", target.ShardID, target.SequenceNumber, again, want)
	}
	if err := sub.Seek(e.ctx, runtime.AtSequence("shardId-999999999999", "1")); !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("Seek to a shard the subscription does not read = %v, want ErrInvalid", err)
	}
}

// A Connect that fails on one subscription stops the ones it started
// (leases released) and keeps them all registered: a later Connect starts
// them again.
func TestFailedConnectCanBeRetried(t *testing.T) { testFailedConnectCanBeRetried(newEnv(t)) }

func testFailedConnectCanBeRetried(e *env) {
	t := e.t
	payments, orders := e.stream("payments"), e.stream("orders")
	e.createStream(payments, 1)
	b := e.broker(runtime.WithOwnerID("svc"))
	hp, chp := collect()
	mustSubscribe(e, b, payments, hp)
	ho, cho := collect()
	mustSubscribe(e, b, orders, ho)
	if err := b.Connect(e.ctx); !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Connect with a missing stream = %v, want ErrStream", err)
	}
	ls := e.leases(payments)
	if len(ls) != 1 {
		t.Fatalf("%d payments leases; the first subscription should have started", len(ls))
	}
	if ls[0].Owner != "" {
		t.Fatalf("lease %s still owned by %q after the failed Connect", ls[0].ShardID, ls[0].Owner)
	}

	e.createStream(orders, 1)
	e.connect(b)
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: payments})
	e.publish(pub, order{ID: 1, Customer: "alice"})
	e.publish(runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}), order{ID: 2, Customer: "bob"})
	if got := receive(e, chp, 1)[0].order.ID; got != 1 {
		t.Fatalf("payments got %d", got)
	}
	if got := receive(e, cho, 1)[0].order.ID; got != 2 {
		t.Fatalf("orders got %d", got)
	}
}

// A KPL aggregate is delivered as its user records, each with its own key;
// a retry copies just that user record.
func TestAggregatedRecordsAreDeliveredOneByOne(t *testing.T) {
	testAggregatedRecords(newEnv(t))
}

func testAggregatedRecords(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	seen := make(chan delivered, 8)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- delivered{o, d}
		if o.ID == 2 && d.Attempt == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	})
	e.connect(b)
	var users []kpl.Record
	for i, key := range []string{"alice", "bob", "carol"} {
		data, _ := json.Marshal(order{ID: i + 1, Customer: key})
		users = append(users, kpl.Record{PartitionKey: key, Data: data})
	}
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("agg"), Data: kpl.Aggregate(users)}); err != nil {
		t.Fatal(err)
	}
	got := receive(e, seen, 4)
	for i, want := range []struct {
		id      int
		key     string
		attempt int
	}{{1, "alice", 1}, {2, "bob", 1}, {3, "carol", 1}, {2, "bob", 2}} {
		d := got[i]
		if d.order.ID != want.id || d.d.PartitionKey != want.key || d.d.Headers()[runtime.PartitionKeyHeader] != want.key || d.d.Attempt != want.attempt {
			t.Fatalf("delivery %d: order %d key %q attempt %d, want order %d key %q attempt %d", i, d.order.ID, d.d.PartitionKey, d.d.Attempt, want.id, want.key, want.attempt)
		}
	}
	if got[0].d.SequenceNumber != got[2].d.SequenceNumber {
		t.Fatalf("user records of one aggregate report different sequence numbers: %s, %s", got[0].d.SequenceNumber, got[2].d.SequenceNumber)
	}
}

// retries=0: a record that asks for a retry is given up at once.
func TestNoRetriesGivesUpAtOnce(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	attempts := make(chan int, 4)
	b := e.broker()
	sub := mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		attempts <- d.Attempt
		return runtime.OutcomeOf(errors.New("printer jammed"))
	}, runtime.MaxRetries(0))
	e.connect(b)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	receive(e, attempts, 1)
	if err := sub.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 0 {
		t.Fatalf("retried although retries=0: attempt %d", <-attempts)
	}
	if line := e.logs.line("record rejected"); !strings.Contains(line, "gave up after 1 attempts: printer jammed") {
		t.Fatalf("rejection log %q", line)
	}
}

// A record whose retry copy would exceed the service's size limit (the
// attempt header does not fit) is given up instead of blocking its shard.
func TestRetryCopyTooLargeIsGivenUp(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	seen := make(chan runtime.Delivery, 4)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		if o.ID == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	})
	e.connect(b)
	pub := e.publisher(orders)
	key := "alice"
	big := order{ID: 1, Customer: strings.Repeat("x", runtime.MaxRecordSize-len(key)-len(`{"id":1,"customer":""}`))}
	if err := pub.Message(big).PartitionKey(key).Publish(e.ctx); err != nil {
		t.Fatalf("publishing a record of the largest size: %v", err)
	}
	e.publish(pub, order{ID: 2, Customer: key})
	got := receive(e, seen, 2) // the big one once, then the next record: the shard moved on
	if got[0].Attempt != 1 || got[1].PartitionKey != key {
		t.Fatalf("deliveries %+v", got)
	}
	if e.logs.line("record too large to republish") == "" || e.logs.line("record rejected") == "" {
		t.Fatal("the oversized retry was not logged as given up")
	}
}
