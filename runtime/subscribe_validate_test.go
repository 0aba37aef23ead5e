package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

type order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

func ack(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }

// countingAPI answers DescribeStreamSummary with "not found" and counts
// every call; any other call fails the test through the nil interface.
type countingAPI struct {
	kinesisapi.API
	describes atomic.Int64
}

func (c *countingAPI) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	c.describes.Add(1)
	return nil, &types.ResourceNotFoundException{Message: aws.String("Stream " + *in.StreamName + " not found")}
}

func TestSubscribeRefusesInvalidSettingsBeforeAnyCall(t *testing.T) {
	cases := []struct {
		name   string
		stream string
		opts   []runtime.SubscribeOption
	}{
		{"empty stream name", "", nil},
		{"stream name with a space", "my orders", nil},
		{"stream name too long", string(make([]byte, 129)), nil},
		{"create_if_missing=0", "orders", []runtime.SubscribeOption{runtime.CreateIfMissing(0)}},
		{"create_if_missing negative", "orders", []runtime.SubscribeOption{runtime.CreateIfMissing(-2)}},
		{"workers=0", "orders", []runtime.SubscribeOption{runtime.Workers(0)}},
		{"workers negative", "orders", []runtime.SubscribeOption{runtime.Workers(-1), runtime.ByKey()}},
		{"workers too many", "orders", []runtime.SubscribeOption{runtime.Workers(runtime.MaxWorkers + 1)}},
		{"batch=0", "orders", []runtime.SubscribeOption{runtime.BatchSize(0)}},
		{"batch over the service limit", "orders", []runtime.SubscribeOption{runtime.BatchSize(10001)}},
		{"poll=0", "orders", []runtime.SubscribeOption{runtime.PollInterval(0)}},
		{"poll over the read budget", "orders", []runtime.SubscribeOption{runtime.PollInterval(100 * time.Millisecond)}},
		{"retries negative", "orders", []runtime.SubscribeOption{runtime.MaxRetries(-1)}},
		{"dead_letter empty", "orders", []runtime.SubscribeOption{runtime.DeadLetter("")}},
		{"dead_letter is the stream", "orders", []runtime.SubscribeOption{runtime.DeadLetter("orders")}},
		{"start_at sequence without shard", "orders", []runtime.SubscribeOption{runtime.StartAt(runtime.AtSequence("", "1"))}},
		{"start_at zero time", "orders", []runtime.SubscribeOption{runtime.StartAt(runtime.AtTime(time.Time{}))}},
		{"fanout empty", "orders", []runtime.SubscribeOption{runtime.FanOut("")}},
		{"fanout with a slash", "orders", []runtime.SubscribeOption{runtime.FanOut("orders/app")}},
		{"fanout too long", "orders", []runtime.SubscribeOption{runtime.FanOut(string(make([]byte, 129)))}},
		{"fanout with poll", "orders", []runtime.SubscribeOption{runtime.FanOut("app"), runtime.PollInterval(time.Second)}},
		{"fanout with batch", "orders", []runtime.SubscribeOption{runtime.FanOut("app"), runtime.BatchSize(100)}},
	}
	for _, connected := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if connected {
				name += " after connect"
			}
			t.Run(name, func(t *testing.T) {
				api := &countingAPI{}
				b := runtime.NewBroker(runtime.WithKinesisClient(api))
				if connected {
					if err := b.Connect(t.Context()); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
				}
				sub, err := runtime.Subscribe(b, tc.stream, ack, tc.opts...)
				if !errors.Is(err, runtime.ErrInvalid) {
					t.Fatalf("Subscribe = %v, want an ErrInvalid error", err)
				}
				var re *runtime.Error
				if !errors.As(err, &re) || re.Stream != tc.stream {
					t.Fatalf("error %#v does not name the stream %q", err, tc.stream)
				}
				if sub != nil {
					t.Fatal("an invalid subscription was returned")
				}
				if n := api.describes.Load(); n != 0 {
					t.Fatalf("%d DescribeStreamSummary calls before the settings were checked", n)
				}
			})
		}
	}
}

func TestSubscribeNilHandlerIsInvalid(t *testing.T) {
	_, err := runtime.Subscribe[order](runtime.NewBroker(), "orders", nil)
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("Subscribe(nil handler) = %v, want ErrInvalid", err)
	}
}

func TestSubscribeSameStreamTwiceIsRefused(t *testing.T) {
	b := runtime.NewBroker()
	first, err := runtime.Subscribe(b, "orders", ack, runtime.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Subscribe(b, "orders", ack)
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("second Subscribe = %v, want ErrInvalid", err)
	}
	// Another stream on the same broker is fine, and so is another broker.
	if _, err := runtime.Subscribe(b, "payments", ack); err != nil {
		t.Fatalf("Subscribe(payments) = %v", err)
	}
	if _, err := runtime.Subscribe(runtime.NewBroker(), "orders", ack); err != nil {
		t.Fatalf("Subscribe on another broker = %v", err)
	}
	// Once stopped, the stream can be subscribed again.
	if err := first.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	default:
		t.Fatal("Done is not closed after Stop")
	}
	if _, err := runtime.Subscribe(b, "orders", ack); err != nil {
		t.Fatalf("Subscribe after Stop = %v", err)
	}
}

func TestSubscribeMissingStreamIsAStreamError(t *testing.T) {
	api := &countingAPI{}
	b := runtime.NewBroker(runtime.WithKinesisClient(api))
	if _, err := runtime.Subscribe(b, "nowhere", ack); err != nil {
		t.Fatal(err)
	}
	err := b.Connect(t.Context())
	if !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Connect = %v, want ErrStream", err)
	}
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("Connect error %v does not reach the service's ResourceNotFoundException", err)
	}
	if api.describes.Load() != 1 {
		t.Fatalf("%d DescribeStreamSummary calls, want 1", api.describes.Load())
	}

	// After Connect, Subscribe itself reports it.
	b2 := runtime.NewBroker(runtime.WithKinesisClient(api))
	if err := b2.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer b2.Shutdown(context.Background())
	if _, err := runtime.Subscribe(b2, "nowhere", ack); !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Subscribe after Connect = %v, want ErrStream", err)
	}
	// The failed stream is not left registered: subscribing again reaches the service again.
	if _, err := runtime.Subscribe(b2, "nowhere", ack); !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("second Subscribe after Connect = %v, want ErrStream (not a duplicate)", err)
	}
}

func TestSeekBeforeConnectIsNotConnected(t *testing.T) {
	sub, err := runtime.Subscribe(runtime.NewBroker(), "orders", ack)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Seek(t.Context(), runtime.Horizon()); !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("Seek before Connect = %v, want ErrNotConnected", err)
	}
}

func TestSubscribeAfterShutdownIsNotConnected(t *testing.T) {
	b := runtime.NewBroker(runtime.WithKinesisClient(&countingAPI{}))
	if err := b.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Subscribe(b, "orders", ack); !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("Subscribe after Shutdown = %v, want ErrNotConnected", err)
	}
}
