package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// consumers lists the stream consumers registered on stream.
func consumers(t *testing.T, srv *kinesistest.Server, stream string) []types.Consumer {
	t.Helper()
	ctx := t.Context()
	sum, err := srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := srv.ListStreamConsumers(ctx, &kinesis.ListStreamConsumersInput{StreamARN: sum.StreamDescriptionSummary.StreamARN})
	if err != nil {
		t.Fatal(err)
	}
	return out.Consumers
}

// A fan-out subscription whose consumer is not registered, without
// create_if_missing, fails its start with an ErrStream error naming the
// stream and the consumer, before anything is read.
func TestFanOutMissingConsumerIsAStreamError(t *testing.T) {
	t.Run("in-process", func(t *testing.T) {
		b, srv := kinesistest.NewBrokerServer()
		testMissingConsumer(t, b, srv)
	})
	t.Run("http2", func(t *testing.T) {
		srv := kinesistest.New()
		h := kinesistest.NewHTTPServer(srv)
		t.Cleanup(h.Close)
		testMissingConsumer(t, runtime.NewBroker(runtime.WithKinesisClient(h.Client())), srv)
	})
}

func testMissingConsumer(t *testing.T, b *runtime.Broker, srv *kinesistest.Server) {
	if err := srv.AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Subscribe(b, "orders", ack, runtime.FanOut("billing")); err != nil {
		t.Fatal(err)
	}
	err := b.Connect(t.Context())
	if err == nil {
		b.Shutdown(context.Background())
		t.Fatal("Connect succeeded without the stream consumer")
	}
	var re *runtime.Error
	if !errors.Is(err, runtime.ErrStream) || !errors.As(err, &re) || re.Stream != "orders" || !strings.Contains(err.Error(), "billing") {
		t.Fatalf("Connect = %v; want an ErrStream *runtime.Error naming stream orders and consumer billing", err)
	}
	for _, op := range []kinesistest.Op{kinesistest.OpGetShardIterator, kinesistest.OpGetRecords, kinesistest.OpSubscribeToShard, kinesistest.OpRegisterStreamConsumer} {
		if n := srv.Calls(op); n != 0 {
			t.Errorf("%d %s calls; want none before the consumer was found", n, op)
		}
	}
	if c := consumers(t, srv, "orders"); len(c) != 0 {
		t.Errorf("consumers %v registered without create_if_missing", c)
	}
}

// With create_if_missing, instances starting at once register the one
// consumer (the losers' RegisterStreamConsumer is refused as in use), all
// wait until it is ACTIVE, and between them read every record by fan-out,
// with no GetRecords call.
func TestFanOutConcurrentRegistrationsConverge(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithConsumerActivation(300 * time.Millisecond))
	if err := srv.AddStream("orders", 4); err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemory()
	var mu sync.Mutex
	got := map[string]int{}
	handler := func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		got[fmt.Sprint(o.ID)]++
		mu.Unlock()
		return runtime.Ack()
	}
	brokers := make([]*runtime.Broker, 3)
	errs := make(chan error, len(brokers))
	for i := range brokers {
		brokers[i] = srv.NewBroker(runtime.WithLeaseStore(store), runtime.WithOwnerID(fmt.Sprint("instance-", i)))
		if _, err := runtime.Subscribe(brokers[i], "orders", handler, runtime.FanOut("billing"), runtime.CreateIfMissing(4), runtime.StartAt(runtime.Horizon())); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range brokers {
		go func() { errs <- b.Connect(t.Context()) }()
	}
	for range brokers {
		if err := <-errs; err != nil {
			t.Fatalf("Connect: %v", err)
		}
	}
	for _, b := range brokers {
		t.Cleanup(func() { b.Shutdown(context.Background()) })
	}
	cs := consumers(t, srv, "orders")
	if len(cs) != 1 || aws.ToString(cs[0].ConsumerName) != "billing" || cs[0].ConsumerStatus != types.ConsumerStatusActive {
		t.Fatalf("consumers %+v; want billing alone, ACTIVE", cs)
	}
	pub := runtime.NewPublisher[order](brokers[0], runtime.PublisherSpec{Stream: "orders"})
	for i := range 40 {
		if err := pub.Message(order{ID: i}).PartitionKey(fmt.Sprint("k", i)).Publish(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 40 records handled", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls; a fan-out subscription makes none", n)
	}
}

// registrationRace is the in-process Kinesis with another instance that
// wins the race to register a stream consumer: right after this instance's
// first DescribeStreamConsumer finds none, the other registers it, so this
// instance's RegisterStreamConsumer is refused with ResourceInUseException.
type registrationRace struct {
	*kinesistest.Server
	once sync.Once
	won  error // the other instance's registration
}

func (r *registrationRace) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	out, err := r.Server.DescribeStreamConsumer(ctx, in, opts...)
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		r.once.Do(func() {
			_, r.won = r.Server.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: in.StreamARN, ConsumerName: in.ConsumerName})
		})
	}
	return out, err
}

// An instance that loses the race to register the stream consumer (its
// RegisterStreamConsumer refused as in use, because another registered it
// between its lookup and its registration) waits for that consumer to be
// ACTIVE and reads through it, instead of failing its start.
func TestFanOutRegistrationLostToAnotherInstanceUsesItsConsumer(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithConsumerActivation(200 * time.Millisecond))
	if err := srv.AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	race := &registrationRace{Server: srv}
	got := make(chan int, 10)
	b := runtime.NewBroker(runtime.WithKinesisClient(race))
	if _, err := runtime.Subscribe(b, "orders", func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		got <- o.ID
		return runtime.Ack()
	}, runtime.FanOut("billing"), runtime.CreateIfMissing(2)); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(t.Context()); err != nil {
		t.Fatalf("Connect after losing the registration race: %v", err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	if race.won != nil {
		t.Fatalf("the other instance's registration failed: %v", race.won)
	}
	// Ours and the other instance's: the runtime's was refused as in use.
	if n := srv.Calls(kinesistest.OpRegisterStreamConsumer); n != 2 {
		t.Fatalf("%d RegisterStreamConsumer calls, want 2 (the other instance's, then this one's, refused)", n)
	}
	if cs := consumers(t, srv, "orders"); len(cs) != 1 || aws.ToString(cs[0].ConsumerName) != "billing" || cs[0].ConsumerStatus != types.ConsumerStatusActive {
		t.Fatalf("consumers %+v; want billing alone, ACTIVE", cs)
	}
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"})
	if err := pub.Message(order{ID: 7}).PartitionKey("k").Publish(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != 7 {
			t.Fatalf("handled order %d, want 7", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the record was not handled through the other instance's consumer")
	}
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls; a fan-out subscription makes none", n)
	}
}

// Two applications with their own stream consumers on one stream each
// handle every record.
func TestFanOutTwoConsumersEachHandleEveryRecord(t *testing.T) {
	srv := kinesistest.New()
	if err := srv.AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	seen := make([]chan int, 2)
	for i, app := range []string{"billing", "shipping"} {
		ch := make(chan int, 100)
		seen[i] = ch
		b := srv.NewBroker(runtime.WithApplication(app))
		if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			ch <- o.ID
			return runtime.Ack()
		}, runtime.FanOut(app), runtime.CreateIfMissing(2)); err != nil {
			t.Fatal(err)
		}
		if err := b.Connect(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Shutdown(context.Background()) })
	}
	pb := srv.NewBroker()
	if err := pb.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pb.Shutdown(context.Background()) })
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"})
	for i := range 30 {
		if err := pub.Message(order{ID: i}).PartitionKey(fmt.Sprint("k", i)).Publish(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range seen {
		ids := map[int]bool{}
		timeout := time.After(10 * time.Second)
		for len(ids) < 30 {
			select {
			case id := <-ch:
				ids[id] = true
			case <-timeout:
				t.Fatalf("consumer %d handled %d of 30 records", i, len(ids))
			}
		}
	}
}

// A consumer deregistered while the subscription reads ends the
// subscription on its own, as a deleted stream does: Done closes and Err
// is an ErrStream error naming the consumer.
func TestFanOutConsumerDeletedEndsTheSubscription(t *testing.T) {
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	sub, err := runtime.Subscribe(b, "orders", ack, runtime.FanOut("billing"), runtime.CreateIfMissing(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	cs := consumers(t, srv, "orders")
	if len(cs) != 1 {
		t.Fatalf("consumers %+v; want billing registered", cs)
	}
	if _, err := srv.DeregisterStreamConsumer(t.Context(), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: cs[0].ConsumerARN}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the subscription went on without its consumer")
	}
	if err := sub.Err(); !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "billing") {
		t.Fatalf("Err() = %v; want an ErrStream error naming the consumer", err)
	}
	if c := consumers(t, srv, "orders"); len(c) != 0 {
		t.Errorf("consumers %+v after the deregistration: the runtime registered it again", c)
	}
}

// Two instances sharing a lease table read one stream by fan-out through
// the HTTP/2 test server (the SDK's real client): a second instance
// joining takes its share by graceful handoff, then the first stops
// gracefully and hands the rest over; while records flow the whole time,
// every record is handled exactly once, in its key's order. Each phase
// lasts until what was published in it is handled, so each instance reads
// by subscription before the next change. A third instance started after
// the second stopped resumes at the checkpoints.
func TestFanOutHandoffBetweenInstancesOverHTTP2(t *testing.T) {
	srv := kinesistest.New()
	h := kinesistest.NewHTTPServer(srv)
	t.Cleanup(h.Close)
	if err := srv.AddStream("orders", 4); err != nil {
		t.Fatal(err)
	}
	retries := func(o *kinesis.Options) { o.Retryer = retry.NewStandard() }
	testFanOutHandoff(t, func() kinesisapi.API { return h.Client(retries) }, "orders", 1, nil)
}

// testFanOutHandoff runs the handoff scenario on stream (created with 4
// shards if missing) through clients from newClient; slow multiplies its
// time bounds (livetest.KinesisServer.Slow). alone, if set, holds the
// first instance alone until it reports true; then that instance must
// handle more records before the second joins.
func testFanOutHandoff(t *testing.T, newClient func() kinesisapi.API, stream string, slow int, alone func() bool) {
	scale := time.Duration(slow)
	store := lease.NewMemory()
	var mu sync.Mutex
	handled := map[int]int{}    // order id -> times handled
	byOwner := map[string]int{} // instance -> records it handled
	lastOf := map[string]int{}  // key -> last id handled
	ownLast := map[string]int{} // instance and key -> last id the instance handled
	var disorder, ownDisorder []string
	instance := func(name string) *runtime.Broker {
		handler := func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			mu.Lock()
			defer mu.Unlock()
			handled[o.ID]++
			byOwner[name]++
			if last, ok := lastOf[o.Customer]; ok && o.ID < last {
				disorder = append(disorder, fmt.Sprintf("%s: %d after %d", o.Customer, o.ID, last))
			}
			lastOf[o.Customer] = o.ID
			if last, ok := ownLast[name+"/"+o.Customer]; ok && o.ID <= last {
				ownDisorder = append(ownDisorder, fmt.Sprintf("%s, %s: %d after %d", name, o.Customer, o.ID, last))
			}
			ownLast[name+"/"+o.Customer] = o.ID
			return runtime.Ack()
		}
		b := runtime.NewBroker(runtime.WithKinesisClient(newClient()), runtime.WithLeaseStore(store), runtime.WithOwnerID(name),
			runtime.WithShardSyncInterval(200*time.Millisecond), runtime.WithLeaseRenewInterval(100*time.Millisecond),
			runtime.WithFailoverTime(2*time.Second*scale), runtime.WithCheckpointInterval(50*time.Millisecond))
		if _, err := runtime.Subscribe(b, stream, handler, runtime.FanOut("billing"), runtime.CreateIfMissing(4), runtime.StartAt(runtime.Horizon())); err != nil {
			t.Fatal(err)
		}
		if err := b.Connect(t.Context()); err != nil {
			t.Fatalf("%s: Connect: %v", name, err)
		}
		t.Cleanup(func() { b.Shutdown(context.Background()) })
		return b
	}
	a := instance("a")
	pb := runtime.NewBroker(runtime.WithKinesisClient(newClient()))
	if err := pb.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pb.Shutdown(context.Background()) })
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: stream})
	stop := make(chan struct{})
	published := make(chan int, 1)
	var count atomic.Int64 // records published so far
	// After a Fatal, the publisher stops before pb shuts down under it.
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-published
		}
	})
	go func() {
		n := 0
		defer func() { published <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cust := fmt.Sprint("c", n%16)
			if err := pub.Message(order{ID: n, Customer: cust}).PartitionKey(cust).Publish(context.Background()); err != nil {
				t.Error(err)
				return
			}
			n++
			count.Store(int64(n))
			time.Sleep(2 * time.Millisecond * scale)
		}
	}()
	// Each phase lasts until the publisher has put more records in, not for
	// a fixed time: a publish through the HTTP/2 server under -race on a
	// loaded machine takes from 2 to over 20 ms, and a sleep let too few
	// records through to show anything about the handoff.
	more := func(k int64, phase string) {
		t.Helper()
		want := count.Load() + k
		deadline := time.Now().Add(20 * time.Second * scale)
		for count.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d records published, want %d", phase, count.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// allHandled waits until the records 0..n-1 were all handled.
	allHandled := func(n int, phase string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second * scale)
		for {
			mu.Lock()
			got := 0
			for id := range n {
				if handled[id] > 0 {
					got++
				}
			}
			mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d records handled", phase, got, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// phase publishes k more records and waits until they are handled
	// (records go on flowing meanwhile).
	phase := func(k int64, what string) {
		t.Helper()
		more(k, what)
		allHandled(int(count.Load()), what)
	}
	phase(40, "a alone")
	if alone != nil {
		eventuallyRT(t, 15*time.Second*scale, "a alone: the condition to go on", alone)
		phase(40, "a alone, after the condition")
	}
	b := instance("b")
	deadline := time.Now().Add(15 * time.Second * scale)
	for {
		st := b.Status()
		n := 0
		for _, s := range st.Subscriptions {
			n += len(s.Shards)
		}
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b holds %d shards, want 2 after the handoff", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	phase(40, "a and b sharing the shards")
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatalf("a: Shutdown: %v", err)
	}
	mu.Lock()
	byA := byOwner["a"]
	mu.Unlock()
	phase(40, "after a stopped")
	close(stop)
	n := <-published
	allHandled(n, "after the publisher stopped")
	// b stops gracefully (its checkpoints written), and c, starting after
	// it, resumes there: it handles the records published since, and none
	// of those handled before.
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatalf("b: Shutdown: %v", err)
	}
	c := instance("c")
	for i := n; i < n+16; i++ {
		cust := fmt.Sprint("c", i%16)
		if err := pub.Message(order{ID: i, Customer: cust}).PartitionKey(cust).Publish(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	allHandled(n+16, "after c started")
	time.Sleep(300 * time.Millisecond * scale) // a duplicate would come now
	// A lease lost on the way (a renewal late past the fence on a loaded
	// machine) sends its next owner back to the last checkpoint: records
	// the fenced owner handled after it come again, and a key's order
	// holds within each owner only. Without one, every handoff and stop
	// was graceful: each record once, each key in order throughout.
	lost := a.Status().Leases.Lost + b.Status().Leases.Lost + c.Status().Leases.Lost
	mu.Lock()
	defer mu.Unlock()
	if len(ownDisorder) > 0 {
		t.Errorf("keys out of order within one instance: %v", ownDisorder)
	}
	var twice []string
	for id, times := range handled {
		if times != 1 {
			twice = append(twice, fmt.Sprintf("%d ×%d", id, times))
		}
	}
	switch {
	case lost > 0:
		t.Logf("%d leases lost (fenced) on the way: %d records handled more than once, %d out of order across owners (at least once, from the last checkpoint)", lost, len(twice), len(disorder))
	case len(twice) > 0:
		t.Errorf("records handled more than once with no lease lost: %v; want once (graceful handoffs, a restart at the checkpoints)", twice)
	case len(disorder) > 0:
		t.Errorf("keys out of order with no lease lost: %v", disorder)
	}
	if byA == 0 || byOwner["b"] == 0 || byOwner["c"] != 16 || byOwner["a"] != byA {
		t.Errorf("records handled by a, b, c: %v (a %d before it stopped); want a and b some, a none after it stopped, c the 16 published after b stopped", byOwner, byA)
	}
}
