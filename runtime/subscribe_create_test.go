package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// creatingStream describes stream, once the server holds it, as CREATING
// for its first creating answers and as DELETING after them; with
// creating < 0 it stays CREATING for ever.
type creatingStream struct {
	kinesisapi.API
	stream   string
	creating int64
	answers  atomic.Int64
}

func (c *creatingStream) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	out, err := c.API.DescribeStreamSummary(ctx, in, opts...)
	if err != nil || aws.ToString(in.StreamName) != c.stream {
		return out, err
	}
	status := types.StreamStatusCreating
	if n := c.answers.Add(1); c.creating >= 0 && n > c.creating {
		status = types.StreamStatusDeleting
	}
	sum := *out.StreamDescriptionSummary
	sum.StreamStatus = status
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &sum}, nil
}

// within runs f and returns how long it took and its error; f still
// running after bound fails the test.
func within(t *testing.T, bound time.Duration, f func() error) (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- f() }()
	select {
	case err := <-done:
		return time.Since(began), err
	case <-time.After(bound):
		t.Fatalf("still waiting after %s", bound)
		return 0, nil
	}
}

// startCreating sets up the tests below: the create wait shortened to
// wait, a server that answers as creatingStream does with creating, and a
// broker, not connected, whose Shutdown at the end is bounded.
func startCreating(t *testing.T, wait time.Duration, creating int64) (*env, *creatingStream, *runtime.Broker) {
	t.Helper()
	runtime.ShortenCreateWait(t, wait)
	api := &creatingStream{API: kinesistest.New(), creating: creating}
	e := newEnvWith(t, api)
	api.stream = e.stream("fresh")
	b := e.broker()
	shutdownBounded(t, b)
	return e, api, b
}

// shutdownBounded shuts b down when t ends, giving it 5 s: a start that
// never ends fails the test instead of hanging it.
func shutdownBounded(t *testing.T, b *runtime.Broker) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
}

// subscribeCreating connects b, then subscribes to the stream with
// CreateIfMissing, within bound; it returns how long the Subscribe took.
func subscribeCreating(e *env, b *runtime.Broker, stream string, bound time.Duration) (time.Duration, error) {
	e.t.Helper()
	if err := b.Connect(e.ctx); err != nil {
		e.t.Fatalf("Connect: %v", err)
	}
	return within(e.t, bound, func() error {
		_, err := subscribe(e, b, stream, ack, runtime.CreateIfMissing(1))
		return err
	})
}

// A stream created by create_if_missing that never becomes active fails
// the Subscribe with an ErrStream error once the wait for it ends, not
// before and not much later.
func TestCreateIfMissingStreamNeverActive(t *testing.T) {
	// A second: the polls come 20, 60, 140, 300 and 620 ms in, so a
	// single one means a stall of most of the wait (300 ms saw one poll
	// on a loaded CI machine).
	const wait = time.Second
	e, api, b := startCreating(t, wait, -1)
	took, err := subscribeCreating(e, b, api.stream, wait+5*time.Second)
	if !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "not active") || !strings.Contains(err.Error(), api.stream) {
		t.Fatalf("Subscribe on a stream never active = %v, want an ErrStream error saying %s is not active", err, api.stream)
	}
	if took < wait {
		t.Fatalf("Subscribe failed after %s, before the wait of %s ended", took, wait)
	}
	if n := api.answers.Load(); n < 2 {
		t.Fatalf("the stream was described %d times during the wait, want it polled", n)
	}
}

// A stream that turns DELETING while create_if_missing waits for it fails
// the start at once, without waiting out the rest.
func TestCreateIfMissingStreamDeletedMeanwhile(t *testing.T) {
	const wait = 5 * time.Second
	e, api, b := startCreating(t, wait, 2)
	took, err := subscribeCreating(e, b, api.stream, wait+5*time.Second)
	if !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("Subscribe on a stream deleted while created = %v, want an ErrStream error saying it is being deleted", err)
	}
	if took >= wait/2 {
		t.Fatalf("Subscribe failed after %s: it waited for a stream being deleted", took)
	}
}

// The caller's context ending first ends the wait: Connect (starting a
// Subscribe registered before it) returns an ErrStream error wrapping that
// context's error, long before the wait would have ended.
func TestCreateIfMissingWaitEndsWithConnectContext(t *testing.T) {
	const wait = 3 * time.Second
	e, api, b := startCreating(t, wait, -1)
	mustSubscribe(e, b, api.stream, ack, runtime.CreateIfMissing(1))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	took, err := within(t, wait+5*time.Second, func() error { return b.Connect(ctx) })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "not active") {
		t.Fatalf("Connect whose context ended during the create wait = %v, want an ErrStream error wrapping context.Canceled", err)
	}
	if took >= wait/2 {
		t.Fatalf("Connect returned %s after its context ended at 100ms", took)
	}
}

// A fan-out consumer that create_if_missing registers and that never
// becomes ACTIVE fails the start with an ErrStream error naming it once the
// wait (the stream's create wait) ends, not before; it stays registered.
func TestCreateIfMissingConsumerNeverActive(t *testing.T) {
	const wait = 300 * time.Millisecond
	runtime.ShortenCreateWait(t, wait)
	srv := kinesistest.New(kinesistest.WithConsumerActivation(time.Hour))
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	b := srv.NewBroker()
	shutdownBounded(t, b)
	handler := func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }
	if _, err := runtime.Subscribe(b, "orders", handler, runtime.FanOut("billing"), runtime.CreateIfMissing(1)); err != nil {
		t.Fatal(err)
	}
	took, err := within(t, wait+5*time.Second, func() error { return b.Connect(t.Context()) })
	if !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "billing") || !strings.Contains(err.Error(), "not active") {
		t.Fatalf("Connect with a consumer never active = %v, want an ErrStream error saying consumer billing is not active", err)
	}
	if took < wait {
		t.Fatalf("Connect failed after %s, before the wait of %s ended", took, wait)
	}
	if cs := consumers(t, srv, "orders"); len(cs) != 1 || aws.ToString(cs[0].ConsumerName) != "billing" || cs[0].ConsumerStatus != types.ConsumerStatusCreating {
		t.Errorf("consumers %+v; want billing alone, still CREATING", cs)
	}
}

// tableNeverActive is a memory lease store whose table is being created
// and never becomes ACTIVE while active is unset: its EnsureTable (which
// the start runs, bounded only by the start) waits until its ctx ends.
type tableNeverActive struct {
	*lease.Memory
	active atomic.Bool
}

func (s *tableNeverActive) EnsureTable(ctx context.Context) error {
	if s.active.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// A Subscribe after Connect, which has no caller's context, whose start
// cannot finish (its lease table never becomes ACTIVE) gives up once the
// start bound ends, with an error saying so; the broker stays usable: the
// stream can be subscribed again once the table is there, and Shutdown
// returns.
func TestSubscribeAfterConnectGivesUpAtTheStartBound(t *testing.T) {
	const bound = 300 * time.Millisecond
	runtime.ShortenStartTimeout(t, bound)
	srv := kinesistest.New()
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	store := &tableNeverActive{Memory: lease.NewMemory()}
	b := srv.NewBroker(runtime.WithLeaseStore(store))
	shutdownBounded(t, b)
	if err := b.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	handler := func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }
	subscribe := func() (time.Duration, error) {
		return within(t, bound+5*time.Second, func() error {
			_, err := runtime.Subscribe(b, "orders", handler)
			return err
		})
	}
	took, err := subscribe()
	e, ok := errors.AsType[*runtime.Error](err)
	if !ok || e.Op != "subscribe" || e.Stream != "orders" || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not started within 300ms") {
		t.Fatalf("Subscribe whose start cannot finish = %v, want a subscribe error on orders saying it was not started within 300ms", err)
	}
	if took < bound {
		t.Fatalf("Subscribe failed after %s, before the start bound of %s ended", took, bound)
	}

	runtime.ShortenStartTimeout(t, 10*time.Second) // a start takes a second or so
	store.active.Store(true)
	if _, err := subscribe(); err != nil {
		t.Fatalf("Subscribe once the table is there: %v", err)
	}
	if _, err := within(t, 5*time.Second, func() error { return b.Shutdown(t.Context()) }); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
