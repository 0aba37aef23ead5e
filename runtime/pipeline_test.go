package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestKeyOrderCarriesThroughTwoHops: a handler that publishes without naming
// a key, and a reply handler, put their records under the key of the record
// they handle, so each key's order holds from the first stream to the last.
// The service starts with go b.Run and publishes once b.Ready is closed.
func TestKeyOrderCarriesThroughTwoHops(t *testing.T) { testKeyOrderCarriesThroughTwoHops(newEnv(t)) }

func testKeyOrderCarriesThroughTwoHops(e *env) {
	t := e.t
	in, mid, out := e.stream("hop-in"), e.stream("hop-mid"), e.stream("hop-out")
	b := e.broker()
	midPub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: mid})
	outPub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: out})
	// Hop 1: a publish from inside the handler that names no key.
	mustSubscribe(e, b, in, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		return runtime.OutcomeOf(midPub.Publish(ctx, o))
	}, runtime.CreateIfMissing(3), runtime.Workers(4), runtime.ByKey())
	// Hop 2: a reply, as generated code makes it.
	mustSubscribe(e, b, mid, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		return runtime.ReplyOutcome(ctx, outPub, o, nil)
	}, runtime.CreateIfMissing(2), runtime.Workers(4), runtime.ByKey())
	got, ch := collect()
	mustSubscribe(e, b, out, got, runtime.CreateIfMissing(3))
	e.runUntilReady(b)

	const keys, perKey = 5, 23 // 115 messages
	first := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: in})
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			for i := range perKey {
				o := order{ID: i, Customer: fmt.Sprintf("cust-%d", k)}
				if err := first.Message(o).PartitionKey(o.Customer).Publish(e.ctx); err != nil {
					t.Errorf("publish %+v: %v", o, err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := map[string]int{}
	for _, d := range receive(e, ch, keys*perKey) {
		if d.d.PartitionKey != d.order.Customer {
			t.Fatalf("order %+v arrived under key %q, want its customer's", d.order, d.d.PartitionKey)
		}
		if d.order.ID != next[d.order.Customer] {
			t.Fatalf("customer %s: order %d arrived when %d was next", d.order.Customer, d.order.ID, next[d.order.Customer])
		}
		next[d.order.Customer]++
	}
}

// runUntilReady runs b in the background, as a service does, and returns
// once b.Ready is closed; Run ends (and must end well) with the test.
func (e *env) runUntilReady(b *runtime.Broker) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case err := <-errc:
		e.t.Fatalf("Run: %v", err)
	case <-e.ctx.Done():
		e.t.Fatal("Ready was never closed")
	}
}

// earlyWriter writes a record to a stream just before its first shard
// iterator is taken: what a publisher running beside a subscription that
// is still opening its shards does.
type earlyWriter struct {
	kinesisapi.API
	stream string
	once   sync.Once
	iters  atomic.Int32
}

func (w *earlyWriter) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if aws.ToString(in.StreamName) == w.stream {
		w.once.Do(func() {
			_, _ = w.API.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: in.StreamName, PartitionKey: aws.String("early"), Data: []byte(`{"id":1,"customer":"early"}`)})
		})
		w.iters.Add(1)
	}
	return w.API.GetShardIterator(ctx, in, opts...)
}

// TestASubscriptionThatCreatesItsStreamReadsItFromItsStart: a record
// written between the stream's creation and its shards' opening is
// delivered, as nothing in a new stream predates the subscription.
func TestASubscriptionThatCreatesItsStreamReadsItFromItsStart(t *testing.T) {
	e := newEnv(t)
	w := &earlyWriter{API: kinesistest.New(), stream: e.stream("fresh")}
	e.api = w
	b := e.broker()
	h, ch := collect()
	mustSubscribe(e, b, w.stream, h, runtime.CreateIfMissing(1))
	e.connect(b)
	if d := receive(e, ch, 1)[0]; d.order.Customer != "early" {
		t.Fatalf("delivered %+v, want the early record", d.order)
	}
}

// TestReadyIsClosedOnceEverySubscriptionReads: Ready stays open until Run
// has connected, and then every shard of every subscription has its
// iterator.
func TestReadyIsClosedOnceEverySubscriptionReads(t *testing.T) {
	e := newEnv(t)
	w := &earlyWriter{API: kinesistest.New(), stream: e.stream("ready")}
	e.api = w
	b := e.broker()
	h, _ := collect()
	mustSubscribe(e, b, w.stream, h, runtime.CreateIfMissing(4))
	select {
	case <-b.Ready():
		t.Fatal("Ready is closed before Run")
	default:
	}
	e.runUntilReady(b)
	if n := w.iters.Load(); n != 4 {
		t.Fatalf("Ready with %d of 4 shard iterators taken", n)
	}
}

// TestReadyStaysOpenWhenConnectFails: a failed Connect leaves Ready open,
// so a service waiting on it also watches Run's error.
func TestReadyStaysOpenWhenConnectFails(t *testing.T) {
	e := newEnv(t)
	b := e.broker()
	h, _ := collect()
	mustSubscribe(e, b, e.stream("missing"), h)
	if err := b.Run(e.ctx); err == nil {
		t.Fatal("Run on a missing stream succeeded")
	}
	select {
	case <-b.Ready():
		t.Fatal("Ready closed although Connect failed")
	default:
	}
}

// testOneBadKeyFailsAlone (issue 9, scenario 12): a key the service would
// refuse (200 emoji: 400 UTF-16 units) fails its own publish before any
// call, and the records published beside it are stored.
func testOneBadKeyFailsAlone(e *env) {
	t := e.t
	stream := e.newStream("badkey", 2)
	p := e.publisher(stream)
	bad := strings.Repeat("\U0001F69A", 200)
	errs := make([]error, 50)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i)
			if i == 17 {
				key = bad
			}
			errs[i] = p.Message(order{ID: i, Customer: key}).PartitionKey(key).Publish(e.ctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 17 {
			if !errors.Is(err, runtime.ErrPublish) || !strings.Contains(err.Error(), "400 UTF-16 units") {
				t.Errorf("200-emoji key: %v, want an ErrPublish naming its 400 UTF-16 units", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("record %d failed beside the bad key: %v", i, err)
		}
	}
	h, ch := collect()
	b := e.broker()
	mustSubscribe(e, b, stream, h, runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	if got := receive(e, ch, 49); len(got) != 49 {
		t.Fatalf("read %d records, want 49", len(got))
	}
}

func TestOneBadKeyFailsAlone(t *testing.T) { testOneBadKeyFailsAlone(newEnv(t)) }
