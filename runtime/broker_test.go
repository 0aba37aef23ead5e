package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

type order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connected(t *testing.T, f *fakeKinesis, opts ...Option) *Broker {
	t.Helper()
	b := NewBroker(append([]Option{WithKinesisClient(f)}, opts...)...)
	if err := b.Connect(testCtx(t)); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

// wantKind asserts err is an *Error of kind naming stream.
func wantKind(t *testing.T, err, kind error, stream string) *Error {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v does not match %v", err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *runtime.Error", err)
	}
	if e.Stream != stream {
		t.Errorf("error names stream %q, want %q", e.Stream, stream)
	}
	return e
}

func TestConstructorsDoNoIO(t *testing.T) {
	// Nothing listens on port 1: a constructor that dialled would fail or hang.
	brokers := map[string]*Broker{
		"NewBroker": NewBroker(WithEndpoint("http://127.0.0.1:1"), WithRegion("eu-west-1"),
			WithTestCredentials(), WithOwnerID("me"), WithApplication("app")),
		"NewBrokerFromConfig": NewBrokerFromConfig(aws.Config{Region: "eu-west-1"}, WithEndpoint("http://127.0.0.1:1")),
	}
	for name, b := range brokers {
		t.Run(name, func(t *testing.T) {
			p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})
			err := p.Publish(testCtx(t), order{ID: 1})
			wantKind(t, err, ErrNotConnected, "orders")
		})
	}
}

func TestConnectToAMissingEndpointFailsOnFirstCall(t *testing.T) {
	// Connect loads configuration and builds the client; the SDK dials only
	// on the first request, so a dead endpoint fails the publish, not Connect.
	b := NewBroker(WithEndpoint("http://127.0.0.1:1"), WithTestCredentials())
	if err := b.Connect(testCtx(t)); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer b.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := NewPublisher[order](b, PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: 1})
	wantKind(t, err, ErrPublish, "orders")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not say the context ended", err)
	}
}

func TestCopySharesConnectionAndPublisherBeforeConnectWorks(t *testing.T) {
	f := newFake()
	b := NewBroker(WithKinesisClient(f))
	b2 := *b
	early := NewPublisher[order](&b2, PublisherSpec{Stream: "orders"}) // before Connect, from the copy
	if err := b.Connect(testCtx(t)); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := early.Publish(testCtx(t), order{ID: 1}); err != nil {
		t.Fatalf("publisher made before Connect, on a copy: %v", err)
	}
	if got := len(f.records()); got != 1 {
		t.Fatalf("service holds %d records, want 1", got)
	}
	if err := b2.Shutdown(testCtx(t)); err != nil { // shutting the copy down closes the original
		t.Fatalf("Shutdown: %v", err)
	}
	late := NewPublisher[order](b, PublisherSpec{Stream: "orders"})
	for name, p := range map[string]Publisher[order]{"made before Shutdown": early, "made after Shutdown": late} {
		err := p.Publish(testCtx(t), order{ID: 2})
		t.Run(name, func(t *testing.T) { wantKind(t, err, ErrNotConnected, "orders") })
	}
	if got := len(f.records()); got != 1 {
		t.Fatalf("service holds %d records after Shutdown, want 1", got)
	}
}

func TestConnectStates(t *testing.T) {
	f := newFake()
	b := NewBroker(WithKinesisClient(f))
	ctx := testCtx(t)
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of a broker that never connected: %v", err)
	}
	if err := b.Connect(ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Connect after Shutdown: %v, want ErrInvalid", err)
	}

	b = NewBroker(WithKinesisClient(f))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second Connect: %v, want ErrInvalid", err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestConnectDefaultsOwnerAndLeaseStore(t *testing.T) {
	a, b := connected(t, newFake()), connected(t, newFake())
	ca, _ := a.connection()
	cb, _ := b.connection()
	if ca.owner == "" || ca.owner == cb.owner {
		t.Errorf("owner ids %q and %q: want distinct and non-empty", ca.owner, cb.owner)
	}
	if ca.leases == nil || ca.leases == cb.leases {
		t.Errorf("each broker needs its own default lease store")
	}
	named := connected(t, newFake(), WithOwnerID("worker-1"))
	if c, _ := named.connection(); c.owner != "worker-1" {
		t.Errorf("owner %q, want worker-1", c.owner)
	}
}

func TestShutdownFailsQueuedPublishes(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{}) // the first call never returns on its own
	b := connected(t, f)
	p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})

	errs := make(chan error, 2)
	go func() { errs <- p.Message(order{ID: 1}).PartitionKey("c1").Publish(context.Background()) }()
	<-f.entered // the first record is in flight; the second queues behind its key
	go func() { errs <- p.Message(order{ID: 2}).PartitionKey("c1").Publish(context.Background()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for range 2 {
		select {
		case err := <-errs:
			wantKind(t, err, ErrNotConnected, "orders")
		case <-time.After(5 * time.Second):
			t.Fatal("a publish did not return after Shutdown")
		}
	}
}

func TestRunServesUntilContextEnds(t *testing.T) {
	f := newFake()
	b := NewBroker(WithKinesisClient(f), WithShutdownTimeout(time.Second))
	p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()

	// Publish once Run has connected: retry only while not yet connected.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.Publish(testCtx(t), order{ID: 1})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotConnected) || time.Now().After(deadline) {
			t.Fatalf("publish while running: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantKind(t, p.Publish(testCtx(t), order{ID: 2}), ErrNotConnected, "orders")
}

func TestConnectBuildsTheClientFromTheNamedSettings(t *testing.T) {
	t.Setenv("AWS_REGION", "sa-east-1") // the default chain's region, overridden below
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	tests := []struct {
		name       string
		b          *Broker
		region     string
		endpoint   string
		credential string // access key id the client signs with
	}{
		{
			name:   "default chain",
			b:      NewBroker(),
			region: "sa-east-1",
		},
		{
			name:       "named endpoint, region and test credentials",
			b:          NewBroker(WithEndpoint("http://127.0.0.1:4567"), WithRegion("eu-west-1"), WithTestCredentials()),
			region:     "eu-west-1",
			endpoint:   "http://127.0.0.1:4567",
			credential: "test",
		},
		{
			name: "aws.Config taken as it is",
			b: NewBrokerFromConfig(aws.Config{Region: "ap-south-1",
				Credentials: credentials.NewStaticCredentialsProvider("mine", "secret", "")}),
			region:     "ap-south-1",
			credential: "mine",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.b.Connect(testCtx(t)); err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer tt.b.Shutdown(context.Background())
			c, err := tt.b.connection()
			if err != nil {
				t.Fatal(err)
			}
			o := c.client.(*kinesis.Client).Options()
			if o.Region != tt.region || aws.ToString(o.BaseEndpoint) != tt.endpoint {
				t.Errorf("client region %q endpoint %q, want %q %q", o.Region, aws.ToString(o.BaseEndpoint), tt.region, tt.endpoint)
			}
			if tt.credential != "" {
				creds, err := o.Credentials.Retrieve(testCtx(t))
				if err != nil || creds.AccessKeyID != tt.credential {
					t.Errorf("credentials %q, %v; want access key %q", creds.AccessKeyID, err, tt.credential)
				}
			}
		})
	}
}
