package runtime_test

// An audit of the consume path's promises, by what a user checks: which
// records were handled and how often, what a second owner reads again after
// Shutdown, and what reached the dead-letter stream with which reason. Each
// test names what no older test covered.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// awaitDeadLetters waits (within e's deadline) until the dead-letter
// stream dlq holds a record, and returns what it holds.
func awaitDeadLetters(e *env, srv *kinesistest.Server, dlq string) []runtime.RawRecord {
	e.t.Helper()
	for {
		letters := storedDeadLetters(e, srv, dlq)
		if len(letters) > 0 || e.ctx.Err() != nil {
			return letters
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// badThenFine publishes order 1 of customer bad and order 2 of another,
// checks that the handler (reporting on ch) gets order 2 only, and returns
// the dead letters once order 1's is stored.
func badThenFine(e *env, srv *kinesistest.Server, orders, dlq string, ch <-chan delivered, bad string) []runtime.RawRecord {
	e.t.Helper()
	pub := e.publisher(orders)
	e.publish(pub, order{ID: 1, Customer: bad})
	e.publish(pub, order{ID: 2, Customer: "fine"})
	if got := receive(e, ch, 1)[0].order.ID; got != 2 {
		e.t.Fatalf("handler got order %d, want only 2", got)
	}
	letters := awaitDeadLetters(e, srv, dlq)
	if len(letters) == 0 {
		e.t.Fatal("no dead letter")
	}
	return letters
}

// storedDeadLetters reads the dead-letter stream dlq back from srv, without a
// consumer.
func storedDeadLetters(e *env, srv *kinesistest.Server, dlq string) []runtime.RawRecord {
	e.t.Helper()
	stored, err := srv.Records(dlq)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]runtime.RawRecord, 0, len(stored))
	for _, r := range stored {
		h, payload, err := runtime.DecodeRecord(r.Data)
		if err != nil {
			e.t.Fatalf("dead letter %s does not decode: %v", aws.ToString(r.SequenceNumber), err)
		}
		out = append(out, runtime.RawRecord{Data: payload, Headers: h, PartitionKey: aws.ToString(r.PartitionKey)})
	}
	return out
}

// A rejected record whose dead letter cannot be published (the dead-letter
// stream's puts fail) is not settled, even while by-key workers ack the
// records of other keys that follow it: after Shutdown the next owner
// reads it again (and those after it), never those acked before it, and its
// dead letter goes out once, then. Older tests cover a failing Retry copy
// (TestRetryCopyThatFailsToPublishKeepsTheOriginal), not a failing dead
// letter, nor neighbours acked past an unsettled record in other lanes.
func TestDeadLetterThatFailsToPublishIsReadAgainByTheNextOwner(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	pub := e.publisher(orders)
	for i := 1; i <= 3; i++ { // acked and checkpointed before the trouble
		e.publish(pub, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
	}

	var refusals atomic.Int64
	refused := make(chan struct{}, 64)
	srv.InjectPutFault(func(stream, _ string) error {
		if stream != dlq {
			return nil
		}
		refusals.Add(1)
		select {
		case refused <- struct{}{}:
		default:
		}
		return &types.InternalFailureException{Message: aws.String("injected")}
	})

	handled := make(chan int, 64)
	handler := func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		handled <- o.ID
		if o.Customer == "poison" {
			return runtime.Reject(fmt.Errorf("order %d is poison", o.ID))
		}
		return runtime.Ack()
	}
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond))
	mustSubscribe(e, b1, orders, handler, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq), runtime.Workers(4), runtime.ByKey())
	e.connect(b1)
	receive(e, handled, 3)
	// Let a checkpoint pass orders 1-3 before the poison record arrives.
	time.Sleep(200 * time.Millisecond)
	e.publish(pub, order{ID: 4, Customer: "poison"})
	for i := 5; i <= 8; i++ {
		e.publish(pub, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
	}
	// 4 is rejected; of 5-8, those whose lane is not 4's are acked (a
	// by-key lane is shared by the keys that hash to it).
	drainUntil(e, handled, 4)
	receive(e, refused, 2) // the dead letter failed, and was tried again
	_ = b1.Shutdown(e.ctx)
	srv.InjectPutFault(nil)
	if n := len(storedDeadLetters(e, srv, dlq)); n != 0 {
		t.Fatalf("%d dead letters stored while every put to %s failed", n, dlq)
	}

	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, handler, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq), runtime.Workers(4), runtime.ByKey())
	e.connect(b2)
	again := drainUntil(e, handled, 4)
	slices.Sort(again)
	if !slices.Equal(again, []int{4, 5, 6, 7, 8}) {
		t.Fatalf("second owner handled %v, want [4 5 6 7 8]: the unsettled record and what follows it, nothing acked before it", again)
	}
	letters := awaitDeadLetters(e, srv, dlq)
	if len(letters) != 1 {
		t.Fatalf("%d dead letters after the second owner, want 1", len(letters))
	}
	dl, ok := letters[0].DeadLetter()
	if !ok || !strings.Contains(dl.Reason, "order 4 is poison") || dl.Stream != orders || dl.Attempts != 1 || letters[0].PartitionKey != "poison" {
		t.Fatalf("dead letter %+v (ok %v) under %q; want order 4's reason and origin under its key", dl, ok, letters[0].PartitionKey)
	}
}

// drainUntil takes handled IDs from ch until id is among them, then waits a
// moment for the others in flight and takes those too.
func drainUntil(e *env, ch <-chan int, id int) []int {
	e.t.Helper()
	var got []int
	for !slices.Contains(got, id) {
		got = append(got, receive(e, ch, 1)...)
	}
	time.Sleep(300 * time.Millisecond)
	for len(ch) > 0 {
		got = append(got, <-ch)
	}
	return got
}

// A by-key handler stuck on one key that ignores its context keeps that
// record unsettled through a Shutdown that times out, while the other
// lanes ack the records after it: the next owner reads the stuck record
// again, and nothing acked before it. It does so only once the lease
// expires, a failover time after the Shutdown (issue 29: released at
// once, the next owner handled the record beside the stuck handler), and
// the Shutdown says so (shard.ErrLeftToExpire).
// TestUnacknowledgedRecordIsRedelivered covers one worker whose handler
// honours the cancellation.
func TestStuckByKeyHandlerThatIgnoresCancellationIsReadAgain(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	pub := e.publisher(orders)
	for i := 1; i <= 3; i++ {
		e.publish(pub, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
	}

	stuck := make(chan struct{})
	defer close(stuck)
	handled := make(chan int, 64)
	const failover = 2 * time.Second
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond), runtime.WithFailoverTime(failover))
	mustSubscribe(e, b1, orders, func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		handled <- o.ID
		if o.Customer == "stuck" {
			<-stuck // ignores its context
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Workers(4), runtime.ByKey())
	e.connect(b1)
	receive(e, handled, 3)
	time.Sleep(200 * time.Millisecond) // a checkpoint passes orders 1-3
	e.publish(pub, order{ID: 4, Customer: "stuck"})
	for i := 5; i <= 8; i++ {
		e.publish(pub, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
	}
	drainUntil(e, handled, 4) // and the others whose lane is not 4's
	if err := b1.Shutdown(e.ctx); !errors.Is(err, shard.ErrLeftToExpire) {
		t.Fatalf("Shutdown with a stuck handler = %v, want shard.ErrLeftToExpire", err)
	}
	stopped := time.Now()

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"), runtime.WithFailoverTime(failover))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()), runtime.Workers(4), runtime.ByKey())
	e.connect(b2)
	got := ids(receive(e, ch2, 5))
	if d := time.Since(stopped); d < failover*3/4 {
		t.Errorf("the second owner read the shard %v after the Shutdown, while the first's handler still ran order 4; want the failover time (%v)", d, failover)
	}
	time.Sleep(200 * time.Millisecond) // whatever else the second owner reads
	for len(ch2) > 0 {
		got = append(got, (<-ch2).order.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{4, 5, 6, 7, 8}) {
		t.Fatalf("second owner got %v, want [4 5 6 7 8]", got)
	}
}

// A panic in middleware (not in the handler) is a Retry like any other:
// the record comes back with its attempt counted up and, after MaxRetries,
// goes to the dead-letter stream with the panic as its reason. Older tests
// cover a panicking handler only.
func TestPanickingMiddlewareRetriesThenDeadLetters(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	attempts := make(chan int, 8)
	boom := func(next runtime.HandleFunc) runtime.HandleFunc {
		return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
			attempts <- d.Attempt
			if msg.(order).Customer == "boom" {
				panic("middleware exploded")
			}
			return next(ctx, d, msg)
		}
	}
	h, ch := collect()
	b := e.broker()
	mustSubscribe(e, b, orders, h, runtime.DeadLetter(dlq), runtime.MaxRetries(1), runtime.Use(boom))
	e.connect(b)
	letters := badThenFine(e, srv, orders, dlq, ch, "boom")
	dl, _ := letters[0].DeadLetter()
	if !strings.Contains(dl.Reason, "panicked: middleware exploded") || dl.Attempts != 2 || letters[0].PartitionKey != "boom" {
		t.Fatalf("dead letter %+v under %q; want the panic as reason after 2 attempts", dl, letters[0].PartitionKey)
	}
	var seen []int
	for len(attempts) > 0 {
		seen = append(seen, <-attempts)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []int{1, 1, 2}) {
		t.Fatalf("middleware saw attempts %v; want 1 and 2 for the panicking record, 1 for the other", seen)
	}
}

// Middleware that hands the handler a value of another type gets the
// record rejected, with a reason naming both types, and the handler never
// sees it; the next record goes on. Older tests cover a middleware's own
// Reject, not a mistyped message.
func TestMiddlewareHandingAnotherTypeIsDeadLettered(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	swap := func(next runtime.HandleFunc) runtime.HandleFunc {
		return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
			if o := msg.(order); o.Customer == "swap" {
				return next(ctx, d, &o) // a pointer, not the order the handler takes
			}
			return next(ctx, d, msg)
		}
	}
	h, ch := collect()
	b := e.broker()
	mustSubscribe(e, b, orders, h, runtime.DeadLetter(dlq), runtime.Use(swap))
	e.connect(b)
	letters := badThenFine(e, srv, orders, dlq, ch, "swap")
	dl, _ := letters[0].DeadLetter()
	if !strings.Contains(dl.Reason, "*runtime_test.order") || dl.Attempts != 1 {
		t.Fatalf("dead letter %+v; want a reason naming the mistyped message", dl)
	}
}

// A slow handler that honours its context and answers the cancellation at a
// Shutdown that ran out of time with an error (a Retry) gets no copy
// published: the original stays unsettled and the next owner reads it, as
// attempt 1, and reads no copy. TestUnacknowledgedRecordIsRedelivered
// covers a handler that acks after the cancellation.
func TestHandlerRetryingOnShutdownCancellationLeavesTheOriginal(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)
	entered := make(chan struct{}, 1)
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond))
	mustSubscribe(e, b1, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		entered <- struct{}{}
		<-ctx.Done()
		return runtime.OutcomeOf(ctx.Err())
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b1)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	receive(e, entered, 1)
	_ = b1.Shutdown(e.ctx)
	if stored, err := srv.Records(orders); err != nil || len(stored) != 1 {
		t.Fatalf("%d records in %s after the shutdown (%v), want only the original: a copy went out", len(stored), orders, err)
	}

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	if got := receive(e, ch2, 1)[0]; got.order.ID != 1 || got.d.Attempt != 1 {
		t.Fatalf("second owner got %+v attempt %d, want order 1 attempt 1", got.order, got.d.Attempt)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(ch2); n != 0 {
		t.Fatalf("second owner got %d more deliveries, want none", n)
	}
}

// A slow handler that asks for a Retry while Shutdown waits for it (within
// the timeout) gets its copy published and the original settled: the next
// owner reads the copy (attempt 2) and not the original again.
func TestRetryDuringGracefulShutdownSettlesTheOriginal(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(5*time.Second))
	mustSubscribe(e, b1, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		entered <- struct{}{}
		<-release
		return runtime.Retry()
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b1)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	receive(e, entered, 1)
	done := make(chan error, 1)
	go func() { done <- b1.Shutdown(e.ctx) }()
	time.Sleep(200 * time.Millisecond) // Shutdown is waiting for the handler
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	got := receive(e, ch2, 1)[0]
	time.Sleep(300 * time.Millisecond)
	if got.d.Attempt != 2 || len(ch2) != 0 {
		t.Fatalf("second owner got attempt %d first and %d more, want only the copy (attempt 2)", got.d.Attempt, len(ch2))
	}
}

// In a KPL aggregate, an undecodable sub-record whose dead letter cannot be
// published holds the checkpoint inside the aggregate: the next owner reads
// it and the sub-records after it again, not the one acked before it, and
// the dead letter then goes out once. Older tests cover sub-sequence
// checkpoints of acked sub-records and dead letters that publish.
func TestUnsettledSubRecordHoldsTheCheckpointInsideItsAggregate(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	good := func(id int, key string) kpl.Record {
		data, _ := json.Marshal(order{ID: id, Customer: key})
		return kpl.Record{PartitionKey: key, Data: data}
	}
	agg := kpl.Aggregate([]kpl.Record{good(1, "alice"), {PartitionKey: "bob", Data: []byte("not json {")}, good(3, "carol")})
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("agg"), Data: agg}); err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 64)
	srv.InjectPutFault(func(stream, _ string) error {
		if stream != dlq {
			return nil
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		return &types.InternalFailureException{Message: aws.String("injected")}
	})

	h1, ch1 := collect()
	b1 := e.broker(runtime.WithOwnerID("first"), runtime.WithShutdownTimeout(300*time.Millisecond))
	mustSubscribe(e, b1, orders, h1, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq))
	e.connect(b1)
	if got := receive(e, ch1, 1)[0].order.ID; got != 1 {
		t.Fatalf("first owner handled order %d first, want 1", got)
	}
	receive(e, refused, 2)
	time.Sleep(200 * time.Millisecond) // a checkpoint may pass order 1
	_ = b1.Shutdown(e.ctx)
	srv.InjectPutFault(nil)
	if n := len(ch1); n != 0 {
		t.Fatalf("first owner handled %d records past the unsettled one with one worker", n)
	}

	h2, ch2 := collect()
	b2 := e.broker(runtime.WithOwnerID("second"))
	mustSubscribe(e, b2, orders, h2, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq))
	e.connect(b2)
	got := receive(e, ch2, 1)[0]
	time.Sleep(300 * time.Millisecond)
	if got.order.ID != 3 || len(ch2) != 0 {
		t.Fatalf("second owner handled order %d first and %d more, want only order 3 (1 was acked, 2 is dead-lettered)", got.order.ID, len(ch2))
	}
	letters := storedDeadLetters(e, srv, dlq)
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	if dl, _ := letters[0].DeadLetter(); letters[0].PartitionKey != "bob" || !strings.Contains(dl.Reason, "decode") || string(letters[0].Data) != "not json {" {
		t.Fatalf("dead letter %q under %q, %+v; want bob's undecodable payload with a decode reason", letters[0].Data, letters[0].PartitionKey, dl)
	}
}

// By-key lanes keep a key's records in stream order, and a Retry's copy is
// a new record at the tip: the key's later records are handled before it
// (Retry's doc: the copy loses its place), one at a time all the same. No
// older test pins down where a retried record lands in its key's order.
func TestRetryCopyComesAfterItsKeysLaterRecords(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	type step struct{ id, attempt int }
	steps := make(chan step, 16)
	var g gauge
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		g.enter()
		defer g.leave()
		time.Sleep(5 * time.Millisecond) // long enough to overlap were the key's lane not serial
		steps <- step{o.ID, d.Attempt}
		if o.ID == 1 && d.Attempt == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Workers(4), runtime.ByKey())
	pub := e.publisher(orders)
	for i := 1; i <= 3; i++ { // all stored before the copy can be
		e.publish(pub, order{ID: i, Customer: "alice"})
	}
	e.connect(b)
	got := receive(e, steps, 4)
	want := []step{{1, 1}, {2, 1}, {3, 1}, {1, 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("alice's deliveries %v, want %v", got, want)
	}
	if m := g.max.Load(); m != 1 {
		t.Fatalf("%d of alice's deliveries ran at once, want 1", m)
	}
}

// A payload of JSON null is undecodable for a message type that cannot be
// nil: encoding/json would leave the message as it was, and the handler
// would get a zero order for a record that holds none. The record is
// rejected like any undecodable one, and the next record of the shard is
// handled.
func TestNullPayloadIsNotHandedOverAsAZeroValue(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	h, ch := collect()
	b := e.broker()
	mustSubscribe(e, b, orders, h, runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	for _, data := range []string{"null", " null\n", `{"id":2,"customer":"y"}`} {
		if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("x"), Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := receive(e, ch, 1)[0]; got.order.ID != 2 {
		t.Fatalf("handler got %+v from a null payload, want it rejected", got.order)
	}
}

// Into a type that can be nil, null is nil, as encoding/json makes it;
// into one that cannot, it is an error naming the type.
func TestJSONCodecNull(t *testing.T) {
	var p *order
	if err := runtime.JSON.Unmarshal([]byte("null"), &p); err != nil || p != nil {
		t.Errorf("null into *order: %v, %v; want nil, no error", p, err)
	}
	m := map[string]int{"a": 1}
	if err := runtime.JSON.Unmarshal([]byte("null"), &m); err != nil || m != nil {
		t.Errorf("null into a map: %v, %v; want nil, no error", m, err)
	}
	var o order
	if err := runtime.JSON.Unmarshal([]byte("null"), &o); err == nil || !strings.Contains(err.Error(), "runtime_test.order cannot be nil") {
		t.Errorf("null into order: %v; want an error saying an order cannot be nil", err)
	}
	var n int
	if err := runtime.JSON.Unmarshal([]byte(" null "), &n); err == nil {
		t.Error("null into an int: no error")
	}
	if err := runtime.JSON.Unmarshal([]byte(`{"id":3}`), &o); err != nil || o.ID != 3 {
		t.Errorf("an object: %+v, %v", o, err)
	}
}
