package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/faultproxy"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// holeKinesis is the in-process Kinesis with a black hole in front of
// PutRecords: a call that falls in is never answered, even after the hole
// has closed, until its caller gives up (a connection that died silently).
type holeKinesis struct {
	*kinesistest.Server
	mu    sync.Mutex
	holes int           // calls still to swallow; negative: every call
	fell  int           // calls swallowed so far
	gone  chan struct{} // closed at the test's end: releases the swallowed calls
}

func (h *holeKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	h.mu.Lock()
	swallow := h.holes != 0
	if swallow {
		h.holes--
		h.fell++
	}
	h.mu.Unlock()
	if swallow {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-h.gone:
			return nil, errors.New("connection closed")
		}
	}
	return h.Server.PutRecords(ctx, in, opts...)
}

// blackHole is a Kinesis backend for the deadline tests and a way to make
// its next n PutRecords calls (every one, for n < 0) go unanswered; held
// reports how many calls went unanswered so far. release ends the calls
// held, so that a test that fails cannot hang in its broker's cleanup.
type blackHole struct {
	e       *env
	open    func(n int)
	held    func() int
	release func()
}

func inProcessHole(t *testing.T) blackHole {
	h := &holeKinesis{Server: kinesistest.New(kinesistest.WithLongPoll(time.Second)), gone: make(chan struct{})}
	var once sync.Once
	return blackHole{
		release: func() { once.Do(func() { close(h.gone) }) },
		e:       newEnvWith(t, h),
		open:    func(n int) { h.mu.Lock(); h.holes = n; h.mu.Unlock() },
		held:    func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.fell },
	}
}

// kinesaliteHole puts the fault proxy's black hole between the runtime and
// kinesalite: the request reaches the proxy over a real connection and is
// never forwarded nor answered.
func kinesaliteHole(t *testing.T) blackHole {
	p, err := faultproxy.New(livetest.KinesisEndpoint(t), 11)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	client := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(p.URL()) })
	return blackHole{
		release: func() { _ = p.Close() },
		e:       newEnvWith(t, client),
		open: func(n int) {
			r := faultproxy.Rule{Ops: []string{"PutRecords"}, Fault: faultproxy.BlackHole, Rate: 1}
			if n > 0 {
				r.Max = n
			}
			if err := p.Set(r); err != nil {
				t.Fatal(err)
			}
		},
		held: func() int {
			return int(p.Injected()[faultproxy.Injection{Op: "PutRecords", Fault: faultproxy.BlackHole}])
		},
	}
}

// callTimeout is the PutRecords deadline of the deadline tests.
const callTimeout = 300 * time.Millisecond

// broker is a connected broker of the env whose PutRecords calls end at
// callTimeout; the calls held are released before its Shutdown.
func (bh blackHole) broker() *runtime.Broker {
	b := bh.e.broker(runtime.WithPublishCallTimeout(callTimeout))
	bh.e.connect(b)
	bh.e.t.Cleanup(bh.release) // runs before the broker's Shutdown
	return b
}

// Issue 9, scenario 11: a PutRecords call that is never answered ends at its
// deadline, its record is sent again and stored, and its key is not wedged:
// the key's next record follows, in order.
func TestUnansweredPutRecordsIsRetriedAndTheKeyMovesOn(t *testing.T) {
	testUnansweredPutRecordsIsRetried(inProcessHole(t))
}

func TestUnansweredPutRecordsIsRetriedAndTheKeyMovesOnKinesalite(t *testing.T) {
	testUnansweredPutRecordsIsRetried(kinesaliteHole(t))
}

func testUnansweredPutRecordsIsRetried(bh blackHole) {
	e, t := bh.e, bh.e.t
	orders := e.newStream("orders", 1)
	b := bh.broker()
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})

	bh.open(1) // the first call falls in; the endpoint answers every later one
	for id := 1; id <= 2; id++ {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		err := p.Message(order{ID: id, Customer: "alice"}).PartitionKey("alice").Publish(ctx)
		cancel()
		if err != nil {
			t.Fatalf("publish %d of alice after one unanswered call: %v", id, err)
		}
	}
	if n := bh.held(); n != 1 {
		t.Fatalf("%d calls went unanswered, want 1", n)
	}

	h, ch := collect()
	reader := e.broker()
	mustSubscribe(e, reader, orders, h, runtime.StartAt(runtime.Horizon()))
	e.connect(reader)
	if got := ids(receive(e, ch, 2)); got[0] != 1 || got[1] != 2 {
		t.Fatalf("alice's records read as %v, want [1 2]", got)
	}
}

// Shutdown waits for a call that is never answered no more than the call's
// deadline, not its whole timeout, and the publish in flight gets an error.
func TestShutdownDoesNotWaitOutAnUnansweredCall(t *testing.T) {
	testShutdownDoesNotWaitOutAnUnansweredCall(inProcessHole(t))
}

func TestShutdownDoesNotWaitOutAnUnansweredCallKinesalite(t *testing.T) {
	testShutdownDoesNotWaitOutAnUnansweredCall(kinesaliteHole(t))
}

func testShutdownDoesNotWaitOutAnUnansweredCall(bh blackHole) {
	e, t := bh.e, bh.e.t
	orders := e.newStream("orders", 1)
	b := bh.broker()
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})

	bh.open(-1) // no call is ever answered
	done := make(chan error, 1)
	go func() { done <- p.Message(order{ID: 1}).PartitionKey("alice").Publish(e.ctx) }()
	for bh.held() == 0 {
		select {
		case err := <-done:
			t.Fatalf("publish into the black hole returned %v", err)
		case <-e.ctx.Done():
			t.Fatal("no PutRecords call reached the black hole")
		case <-time.After(5 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("Shutdown took %v with one unanswered call (call deadline %v, shutdown timeout 10s)", took, callTimeout)
	}
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrNotConnected) && !errors.Is(err, runtime.ErrPublish) {
			t.Fatalf("publish cut by Shutdown = %v, want ErrNotConnected or ErrPublish", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the publish in flight never returned after Shutdown")
	}
}
