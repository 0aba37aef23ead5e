package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
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
	b := NewBroker(WithEndpoint(refusedEndpoint(t)), WithRegion("us-east-1"), WithTestCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())

	_, err := Subscribe(b, "orders", func(context.Context, order, Delivery) Outcome { return Ack() })
	if !errors.Is(err, ErrTransport) || errors.Is(err, ErrStream) {
		t.Fatalf("Subscribe = %v; want ErrTransport, not ErrStream", err)
	}

	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer pcancel()
	err = NewPublisher[order](b, PublisherSpec{Stream: "orders"}).Publish(pctx, order{ID: 1})
	if !errors.Is(err, ErrTransport) || !errors.Is(err, ErrPublish) {
		t.Fatalf("Publish = %v; want ErrPublish and ErrTransport", err)
	}
}

func TestIsTransport(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "kinesis.example.invalid", IsNotFound: true}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"DNS failure sent by the SDK", &smithy.OperationError{Err: &smithyhttp.RequestSendError{Err: dns}}, true},
		{"bare DNS error", fmt.Errorf("dial: %w", dns), true},
		{"service answered", &smithy.OperationError{Err: &types.ResourceNotFoundException{}}, false},
		{"context ended", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := isTransport(tt.err); got != tt.want {
			t.Errorf("%s: isTransport = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNotConnectedSaysWhatComesFirst(t *testing.T) {
	err := NewPublisher[order](NewBroker(), PublisherSpec{Stream: "orders"}).Publish(context.Background(), order{})
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "Connect or Run") {
		t.Fatalf("publish before Connect = %v; want ErrNotConnected saying Connect or Run comes first", err)
	}
}
