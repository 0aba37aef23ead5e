package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// heldDescribe holds DescribeStreamSummary of one stream until release is
// closed or the call's context ends: a Subscribe stays in its start.
type heldDescribe struct {
	kinesisapi.API
	stream  string
	entered chan struct{}
	release chan struct{}
}

func (h *heldDescribe) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if aws.ToString(in.StreamName) == h.stream {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.API.DescribeStreamSummary(ctx, in, opts...)
}

// leaseWrites sums the counters of stream's leases: it moves with every
// take, renewal, checkpoint and release.
func (e *env) leaseWrites(stream string) (leases int, counters int64) {
	for _, l := range e.leases(stream) {
		leases++
		counters += l.Counter
	}
	return leases, counters
}

// livenessModes are the broker options of each way an instance shows it
// is alive: a member entry per instance (the default with a
// lease.MemberStore) and each lease renewed (WithPerLeaseRenewal, what the
// KCL layout needs). What outlives Shutdown shows in each mode's own writes.
var livenessModes = []struct {
	name string
	opts []runtime.Option
}{
	{"per-instance", nil},
	{"per-lease", []runtime.Option{runtime.WithPerLeaseRenewal()}},
}

// members returns the member entries of stream's lease namespace (none
// when the store keeps no members).
func (e *env) members(stream string) []lease.Member {
	e.t.Helper()
	m, ok := lease.MembersOf(e.store)
	if !ok {
		return nil
	}
	ms, err := m.Members(e.ctx, runtime.DefaultApplication+"/"+stream)
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

// Issue 9, scenario 8: once Shutdown has begun, Subscribe answers
// ErrNotConnected, and nothing it started (a coordinator renewing leases,
// or heartbeating its member entry) outlives Shutdown, in either liveness
// mode.
func TestSubscribeDuringShutdownIsRefused(t *testing.T) {
	for _, mode := range livenessModes {
		t.Run(mode.name, func(t *testing.T) { testSubscribeDuringShutdown(t, mode.opts) })
	}
}

func testSubscribeDuringShutdown(t *testing.T, opts []runtime.Option) {
	e := newEnv(t)
	orders, audit := e.newStream("orders", 1), e.newStream("audit", 1)
	b := e.broker(opts...)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		entered <- struct{}{}
		<-release // a slow handler keeps Shutdown waiting for its lane
		return runtime.Ack()
	})
	e.connect(b)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	receive(e, entered, 1)

	shut := make(chan error, 1)
	go func() { shut <- b.Shutdown(e.ctx) }()
	for e.logs.line("kinesis broker shutting down") == "" {
		if e.ctx.Err() != nil {
			t.Fatal("Shutdown never began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h, _ := collect()
	_, err := subscribe(e, b, audit, h)
	close(release)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("Subscribe during Shutdown = %v, want ErrNotConnected", err)
	}
	_, ordersWrites := e.leaseWrites(orders)
	time.Sleep(300 * time.Millisecond) // three renewal intervals
	// The subscription made before Shutdown stopped with it: its lease is
	// no longer written, its member entry is gone.
	if _, n := e.leaseWrites(orders); n != ordersWrites {
		t.Fatalf("%d writes of %s's leases after Shutdown returned", n-ordersWrites, orders)
	}
	if ms := e.members(orders); len(ms) != 0 {
		t.Fatalf("member entries %+v of %s after Shutdown returned", ms, orders)
	}
	if n, _ := e.leaseWrites(audit); n != 0 {
		t.Fatalf("%d leases of %s taken by a Subscribe made during Shutdown", n, audit)
	}
	if ms := e.members(audit); len(ms) != 0 {
		t.Fatalf("member entries %+v of %s written by a Subscribe made during Shutdown", ms, audit)
	}
}

// A Subscribe still starting when Shutdown begins is stopped before
// Shutdown returns: after it, the lease store sees nothing of it (no lease,
// no lease write, no member entry), in either liveness mode.
func TestShutdownStopsASubscribeStillStarting(t *testing.T) {
	for _, mode := range livenessModes {
		t.Run(mode.name, func(t *testing.T) { testShutdownStopsASubscribeStillStarting(t, mode.opts) })
	}
}

func testShutdownStopsASubscribeStillStarting(t *testing.T, opts []runtime.Option) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	held := &heldDescribe{API: srv, entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnvWith(t, held)
	orders := e.newStream("orders", 1)
	held.stream = orders // from now on
	b := e.broker(opts...)
	e.connect(b)
	h, _ := collect()
	subscribed := make(chan error, 1)
	go func() {
		_, err := subscribe(e, b, orders, h)
		subscribed <- err
	}()
	select {
	case <-held.entered:
	case <-e.ctx.Done():
		t.Fatal("Subscribe never asked for the stream")
	}
	if err := b.Shutdown(e.ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	close(held.release)
	n, before := e.leaseWrites(orders)
	var err error
	select {
	case err = <-subscribed:
	case <-e.ctx.Done():
		t.Fatal("Subscribe did not return")
	}
	if !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("Subscribe stopped by Shutdown = %v, want ErrNotConnected", err)
	}
	time.Sleep(300 * time.Millisecond)
	if m, after := e.leaseWrites(orders); m != n || after != before {
		t.Fatalf("after Shutdown returned, the lease store saw %d more leases and %d more writes of %s", m-n, after-before, orders)
	}
	if ms := e.members(orders); len(ms) != 0 {
		t.Fatalf("member entries %+v of %s after Shutdown returned", ms, orders)
	}
	if line := e.logs.line("subscribed"); strings.Contains(line, orders) {
		t.Fatalf("the subscription started after Shutdown: %s", line)
	}
}
