package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// readCounter counts GetRecords calls.
type readCounter struct {
	kinesisapi.API
	reads atomic.Int64
}

func (c *readCounter) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.reads.Add(1)
	return c.API.GetRecords(ctx, in, o...)
}

// A subscription whose stream is deleted ends with an ErrStream error that
// the program sees: its Done closes, Err says why, Run returns it, and no
// GetRecords call is made any more. (Before the fix the readers retried
// GetRecords for ever, and nothing but a log line said so.)
func TestDeletedStreamEndsTheSubscription(t *testing.T) {
	testDeletedStream(t, kinesistest.New())
}

// The same on kinesalite.
func TestDeletedStreamEndsTheSubscriptionOnKinesalite(t *testing.T) {
	url := livetest.KinesisEndpoint(t)
	testDeletedStream(t, kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) }))
}

// The same on kinesis-mock, whose deletion goes through DELETING.
func TestDeletedStreamEndsTheSubscriptionOnKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	testDeletedStream(t, kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) }))
}

func testDeletedStream(t *testing.T, api kinesisapi.API) {
	client := &readCounter{API: api}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := fmt.Sprintf("doomed-%d", time.Now().UnixNano())
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == "ACTIVE" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream not active: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := runtime.NewBroker(runtime.WithKinesisClient(client), runtime.WithShutdownTimeout(2*time.Second))
	sub, err := runtime.Subscribe(b, stream, func(context.Context, runtime.RawRecord, runtime.Delivery) runtime.Outcome {
		return runtime.Ack()
	}, runtime.PollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan error, 1)
	go func() { ran <- b.Run(runCtx) }()
	select {
	case <-b.Ready():
	case err := <-ran:
		t.Fatalf("Run: %v", err)
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err of a running subscription: %v, want nil", err)
	}

	deleted := time.Now()
	if _, err := api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
		t.Logf("subscription ended %v after its stream was deleted", time.Since(deleted).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("subscription still running 10 s after its stream was deleted (%d GetRecords calls)", client.reads.Load())
	}
	if err := sub.Err(); !errors.Is(err, runtime.ErrStream) {
		t.Fatalf("Err = %v, want an ErrStream error", err)
	}
	t.Logf("Err: %v", sub.Err())
	select {
	case err := <-ran:
		if !errors.Is(err, runtime.ErrStream) {
			t.Fatalf("Run returned %v, want the subscription's ErrStream error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running after its subscription's stream was deleted")
	}
	n := client.reads.Load()
	time.Sleep(time.Second)
	if more := client.reads.Load() - n; more != 0 {
		t.Fatalf("%d GetRecords calls in the second after the subscription ended", more)
	}
}

// heldLeases holds every lease-store call while open, until the caller
// gives up (an endpoint that takes requests and never answers).
type heldLeases struct {
	lease.Store
	open atomic.Bool
	held atomic.Int64
}

func (s *heldLeases) hold(ctx context.Context) error {
	if !s.open.Load() {
		return nil
	}
	s.held.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *heldLeases) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if err := s.hold(ctx); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, ns)
}

func (s *heldLeases) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if err := s.hold(ctx); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Renew(ctx, l)
}

func (s *heldLeases) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	if err := s.hold(ctx); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Checkpoint(ctx, l, cp, sub)
}

func (s *heldLeases) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if err := s.hold(ctx); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Release(ctx, l)
}

// heldMembers is heldLeases that keeps members and holds their calls too:
// with liveness per instance a pass at rest calls nothing else.
type heldMembers struct {
	*heldLeases
	m lease.MemberStore
}

func (s heldMembers) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if err := s.hold(ctx); err != nil {
		return err
	}
	return s.m.Heartbeat(ctx, ns, m)
}

func (s heldMembers) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if err := s.hold(ctx); err != nil {
		return nil, err
	}
	return s.m.Members(ctx, ns)
}

func (s heldMembers) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if err := s.hold(ctx); err != nil {
		return err
	}
	return s.m.Leave(ctx, ns, owner, beat)
}

// Shutdown returns in bounded time while the lease store holds every call
// (issue 9, scenario 10: a SIGTERM used to hang on the lock a pass stuck in
// such a call held), in either liveness mode: per lease (a store that
// keeps no members) the held calls are renewals and listings, per instance
// heartbeats and member reads.
func TestShutdownWhileLeaseStoreHoldsCalls(t *testing.T) {
	t.Run("per-lease", func(t *testing.T) {
		held := &heldLeases{Store: lease.NewMemory()}
		testShutdownWhileLeaseStoreHolds(t, held, held)
	})
	t.Run("per-instance", func(t *testing.T) {
		mem := lease.NewMemory()
		held := &heldLeases{Store: mem}
		testShutdownWhileLeaseStoreHolds(t, heldMembers{heldLeases: held, m: mem}, held)
	})
}

func testShutdownWhileLeaseStoreHolds(t *testing.T, leases lease.Store, store *heldLeases) {
	b, srv := kinesistest.NewBrokerServer(runtime.WithLeaseStore(leases), runtime.WithShutdownTimeout(time.Second),
		runtime.WithFailoverTime(time.Second), runtime.WithLeaseRenewInterval(100*time.Millisecond), runtime.WithShardSyncInterval(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("held"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Subscribe(b, "held", func(context.Context, runtime.RawRecord, runtime.Delivery) runtime.Outcome {
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	store.open.Store(true)
	for store.held.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no lease-store call was made while the store held them")
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done <- b.Shutdown(sctx)
	}()
	select {
	case err := <-done:
		t.Logf("Shutdown returned after %v: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown has not returned after 10 s while the lease store holds its calls")
	}
}
