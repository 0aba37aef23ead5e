package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

const (
	ownerAccount  = "111111111111" // owns the shared stream
	readerAccount = "222222222222" // reads and writes it by ARN
)

// Issue 31, item 4, over the HTTP server (the SDK's wire, each account's
// own credentials): account 222… reads and writes account 111…'s stream
// "orders" by its ARN while it has a stream "orders" of its own, read by
// name in the same application with the same lease store. Each
// subscription sees only its own stream's records (every call of the ARN
// one names the ARN: one by name would reach 222…'s own stream), and
// their leases do not collide.
func TestStreamByARNAcrossAccounts(t *testing.T) {
	s := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	h := kinesistest.NewHTTPServer(s)
	t.Cleanup(h.Close)
	ctx := testContext(t, 60*time.Second)
	owner, reader := h.ClientAs(ownerAccount), h.ClientAs(readerAccount)
	for _, c := range []*kinesis.Client{owner, reader} {
		if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(2)}); err != nil {
			t.Fatal(err)
		}
	}
	arn := fmt.Sprintf("arn:aws:kinesis:us-east-1:%s:stream/orders", ownerAccount)
	store := lease.NewMemory()

	type seen struct {
		mu  sync.Mutex
		got map[string]bool
	}
	sub := func(stream string, into *seen, app string, opts ...runtime.SubscribeOption) *runtime.Broker {
		b := runtime.NewBroker(runtime.WithKinesisClient(reader), runtime.WithLeaseStore(store), runtime.WithApplication(app),
			runtime.WithShardSyncInterval(200*time.Millisecond), runtime.WithLeaseRenewInterval(100*time.Millisecond),
			runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithLogger(slog.New(slog.DiscardHandler)))
		if _, err := runtime.Subscribe(b, stream, func(_ context.Context, m order, _ runtime.Delivery) runtime.Outcome {
			into.mu.Lock()
			into.got[m.Customer] = true
			into.mu.Unlock()
			return runtime.Ack()
		}, append(opts, runtime.StartAt(runtime.Horizon()))...); err != nil {
			t.Fatal(err)
		}
		return connect(ctx, t, b)
	}
	theirs, mine, pushed := &seen{got: map[string]bool{}}, &seen{got: map[string]bool{}}, &seen{got: map[string]bool{}}
	poll := runtime.PollInterval(runtime.MinPollInterval)
	sub(arn, theirs, "billing", poll)
	sub("orders", mine, "billing", poll)
	// Enhanced fan-out on the other account's stream: the consumer is
	// registered on it (create_if_missing registers; the stream exists).
	sub(arn, pushed, "audit", runtime.FanOut("audit"), runtime.CreateIfMissing(1))

	pb := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(reader)))
	for i := range 10 {
		if err := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: arn}).Publish(ctx, order{ID: i, Customer: fmt.Sprintf("theirs-%d", i)}); err != nil {
			t.Fatalf("publish by ARN: %v", err)
		}
		if err := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: i, Customer: fmt.Sprintf("mine-%d", i)}); err != nil {
			t.Fatalf("publish by name: %v", err)
		}
	}
	for _, w := range []struct {
		s      *seen
		prefix string
	}{{theirs, "theirs-"}, {mine, "mine-"}, {pushed, "theirs-"}} {
		for {
			w.s.mu.Lock()
			n, wrong := 0, ""
			for k := range w.s.got {
				if len(k) >= len(w.prefix) && k[:len(w.prefix)] == w.prefix {
					n++
				} else {
					wrong = k
				}
			}
			w.s.mu.Unlock()
			if wrong != "" {
				t.Fatalf("the %s subscription read %q, a record of the other stream", w.prefix, wrong)
			}
			if n == 10 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the %s subscription read %d of 10", w.prefix, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The owner's stream holds what was published by ARN.
	out, err := owner.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil || len(out.Shards) != 2 {
		t.Fatalf("the owner's ListShards: %v", err)
	}
	cons, err := owner.ListStreamConsumers(ctx, &kinesis.ListStreamConsumersInput{StreamARN: &arn})
	if err != nil || len(cons.Consumers) != 1 || aws.ToString(cons.Consumers[0].ConsumerName) != "audit" {
		t.Fatalf("the owner's stream consumers: %v; want audit, registered by the other account", err)
	}
	// Leases: today's namespace for the stream named by name, the ARN's for the other.
	byName, _ := store.List(ctx, "billing/orders")
	byARN, _ := store.List(ctx, "billing/"+arn)
	if len(byName) != 2 || len(byARN) != 2 {
		t.Fatalf("leases: %d under billing/orders, %d under billing/%s; want 2 and 2", len(byName), len(byARN), arn)
	}
}

// Issue 31, items 4 and 6: a malformed stream ARN, and the ARN of a region
// other than the client's, are ErrInvalid errors before any I/O, for a
// subscriber (at Subscribe, or at its start) and a publisher alike.
func TestStreamARNErrors(t *testing.T) {
	s := kinesistest.New()
	h := kinesistest.NewHTTPServer(s)
	t.Cleanup(h.Close)
	ctx := testContext(t, 20*time.Second)
	noop := func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }
	for _, bad := range []string{
		"arn:aws:kinesis:us-east-1:1234:stream/orders",
		"arn:aws:sqs:us-east-1:123456789012:orders",
		"arn:aws:kinesis:us-east-1:123456789012:stream/",
		"arn:aws:kinesis::123456789012:stream/orders",
	} {
		b := runtime.NewBroker(runtime.WithKinesisClient(h.Client()))
		if _, err := runtime.Subscribe(b, bad, noop); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("Subscribe(%s): %v; want ErrInvalid", bad, err)
		}
		if _, err := runtime.Subscribe(b, "orders", noop, runtime.DeadLetter(bad)); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("DeadLetter(%s): %v; want ErrInvalid", bad, err)
		}
		connect(ctx, t, b)
		if err := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: bad}).Publish(ctx, order{}); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("publish to %s: %v; want ErrInvalid", bad, err)
		}
	}

	other := "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
	calls := func() int64 {
		n := int64(0)
		for _, op := range []kinesistest.Op{kinesistest.OpDescribeStreamSummary, kinesistest.OpCreateStream, kinesistest.OpListShards, kinesistest.OpGetShardIterator, kinesistest.OpPutRecords} {
			n += s.Calls(op)
		}
		return n
	}
	before := calls()
	b := runtime.NewBroker(runtime.WithKinesisClient(h.Client()))
	if _, err := runtime.Subscribe(b, other, noop); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("Connect with a subscriber of %s on a us-east-1 client: %v; want ErrInvalid", other, err)
	}
	_ = b.Shutdown(context.Background())
	pb := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(h.Client())))
	if err := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: other}).Publish(ctx, order{}); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("publish to %s on a us-east-1 client: %v; want ErrInvalid", other, err)
	}
	if n := calls() - before; n != 0 {
		t.Errorf("%d Kinesis calls for a stream of another region; want none", n)
	}
}
