package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// A subscription stopped while its broker runs on releases its leases, and
// another instance takes its shards at its next lease passes, not after the
// failover time (a minute here): the stopped instance is alive and no
// longer reads them.
func TestStopReleasesLeasesForAnotherInstance(t *testing.T) {
	testStopReleasesLeasesForAnotherInstance(newEnv(t))
}

func testStopReleasesLeasesForAnotherInstance(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	b1 := e.broker(runtime.WithOwnerID("first"))
	h1, _ := collect()
	sub1 := mustSubscribe(e, b1, orders, h1)
	e.connect(b1)
	b2 := e.broker(runtime.WithOwnerID("second"))
	h2, ch2 := collect()
	mustSubscribe(e, b2, orders, h2)
	e.connect(b2)

	if err := sub1.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range e.leases(orders) {
		if l.Owner == "first" {
			t.Fatalf("lease %s still owned by the stopped subscription", l.ShardID)
		}
	}
	start := time.Now()
	for {
		owned := 0
		for _, l := range e.leases(orders) {
			if l.Owner == "second" {
				owned++
			}
		}
		if owned == 2 {
			break
		}
		if time.Since(start) > 10*time.Second { // the failover time is a minute
			t.Fatalf("the other instance owns %d of 2 shards %v after the stop (leases %+v)", owned, time.Since(start), e.leases(orders))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Both shards are read by the other instance.
	pub := e.publisher(orders)
	e.publishRange(pub, 0, 20)
	shards := map[string]bool{}
	for _, d := range receive(e, ch2, 20) {
		shards[d.d.ShardID] = true
	}
	if len(shards) != 2 {
		t.Fatalf("the other instance read %d shards, want 2", len(shards))
	}
}

// A subscription on a stream that already holds records opens each shard at
// the moment it started (Latest, the default): Connect returns with every
// shard open, so nothing written before is read and everything written
// after is, on every shard.
func TestSubscribeOpensAtTheMomentItStarts(t *testing.T) {
	testSubscribeOpensAtTheMomentItStarts(newEnv(t))
}

func testSubscribeOpensAtTheMomentItStarts(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	pub := e.publisher(orders)
	e.publishRange(pub, 0, 20)
	b := e.broker()
	h, ch := collect()
	mustSubscribe(e, b, orders, h)
	e.connect(b)
	e.publishRange(pub, 100, 120)
	shards := map[string]bool{}
	for _, d := range receive(e, ch, 20) {
		if d.order.ID < 100 {
			t.Fatalf("read order %d, published before the subscription started", d.order.ID)
		}
		shards[d.d.ShardID] = true
	}
	if len(shards) != 2 {
		t.Fatalf("records read from %d shards, want 2", len(shards))
	}
	select {
	case d := <-ch:
		t.Fatalf("read order %d more", d.order.ID)
	case <-time.After(300 * time.Millisecond):
	}
}

// The SDK fetches credentials on the first request: a broker whose
// credentials cannot be had connects (Connect makes no request of its
// own), and a subscription's start, whose DescribeStreamSummary is that
// first request, fails with the credential's error at once, as ErrStream
// and ErrAccess.
func TestBadCredentialFailsTheStartNotConnect(t *testing.T) {
	bad := errors.New("no such profile: orders-prod")
	cfg := aws.Config{Region: "us-east-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, bad
	})}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	bare := runtime.NewBrokerFromConfig(cfg, runtime.WithEndpoint("http://127.0.0.1:1"))
	if err := bare.Connect(ctx); err != nil {
		t.Fatalf("Connect without subscriptions = %v, want nil (credentials are fetched lazily)", err)
	}
	_ = bare.Shutdown(ctx)

	b := runtime.NewBrokerFromConfig(cfg, runtime.WithEndpoint("http://127.0.0.1:1"))
	if _, err := runtime.Subscribe(b, "orders", ack); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := b.Connect(ctx)
	defer b.Shutdown(context.Background())
	if !errors.Is(err, bad) {
		t.Fatalf("Connect with a subscription = %v, want the credential's error", err)
	}
	if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Connect with a subscription = %v, want ErrStream and ErrAccess", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the start took %v to fail", d)
	}
}

// A publisher made before Shutdown answers every way of publishing with
// ErrNotConnected afterwards, plain or aggregating, never a silent success.
func TestPublishersThatOutliveTheConnectionAreNotConnected(t *testing.T) {
	for name, opts := range map[string][]runtime.PublishOption{"plain": nil, "aggregating": {runtime.WithAggregation(runtime.Aggregation{})}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			orders := e.newStream("orders", 2)
			b := e.broker()
			e.connect(b)
			p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}, opts...)
			if err := p.Publish(e.ctx, order{ID: 1}); err != nil {
				t.Fatal(err)
			}
			if err := b.Shutdown(e.ctx); err != nil {
				t.Fatal(err)
			}
			err := runtime.PublishAll(e.ctx, p, []order{{ID: 2}, {ID: 3}})
			if !errors.Is(err, runtime.ErrNotConnected) {
				t.Errorf("PublishAll %v", err)
			}
			_, err = runtime.SendAll(e.ctx, []*runtime.Message[order]{p.Message(order{ID: 4}).PartitionKey("k")})
			if !errors.Is(err, runtime.ErrNotConnected) {
				t.Errorf("SendAll %v", err)
			}
			_, err = p.Message(order{ID: 5}).Send(e.ctx)
			if !errors.Is(err, runtime.ErrNotConnected) {
				t.Errorf("Send %v", err)
			}
		})
	}
}
