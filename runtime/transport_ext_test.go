package runtime_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// refusedEndpoint is a loopback address nothing listens on.
func refusedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// TestUnreachableEndpointIsATransportError: a refused connection is not a
// stream error; Subscribe's check and a publish that gave up both match
// ErrTransport (the publish ErrPublish too).
func TestUnreachableEndpointIsATransportError(t *testing.T) {
	b := runtime.NewBroker(runtime.WithEndpoint(refusedEndpoint(t)), runtime.WithRegion("us-east-1"), runtime.WithTestCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())

	_, err := runtime.Subscribe(b, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() })
	if !errors.Is(err, runtime.ErrTransport) || errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Subscribe = %v; want ErrTransport, not ErrStream", err)
	}

	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer pcancel()
	err = runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"}).Publish(pctx, order{ID: 1})
	if !errors.Is(err, runtime.ErrTransport) || !errors.Is(err, runtime.ErrPublish) {
		t.Fatalf("Publish = %v; want ErrPublish and ErrTransport", err)
	}
}

func TestNotConnectedSaysWhatComesFirst(t *testing.T) {
	err := runtime.NewPublisher[order](runtime.NewBroker(), runtime.PublisherSpec{Stream: "orders"}).Publish(context.Background(), order{})
	if !errors.Is(err, runtime.ErrNotConnected) || !strings.Contains(err.Error(), "Connect or Run") {
		t.Fatalf("publish before Connect = %v; want ErrNotConnected saying Connect or Run comes first", err)
	}
}

// TestUnreachableLeaseStoreIsATransportError: a lease table behind a
// refused connection fails Connect with ErrLease that also matches
// ErrTransport.
func TestUnreachableLeaseStoreIsATransportError(t *testing.T) {
	ddb := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(refusedEndpoint(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
	})
	srv := kinesistest.New()
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	b := runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(lease.NewDynamoDB(ddb, "leases")))
	if _, err := runtime.Subscribe(b, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := b.Connect(ctx)
	if err == nil {
		b.Shutdown(ctx)
		t.Fatal("Connect succeeded with an unreachable lease table")
	}
	if !errors.Is(err, runtime.ErrTransport) || !errors.Is(err, runtime.ErrLease) {
		t.Fatalf("Connect = %v; want ErrLease and ErrTransport", err)
	}
}
