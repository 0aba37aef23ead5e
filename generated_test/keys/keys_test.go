package keys_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/generated_test/keys"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestSettingsReachTheRuntime mounts the package whose markers use every key:
// the runtime accepts every generated option, create_if_missing makes the
// stream with its shard count, and replies carry the quoted mount-site key.
func TestSettingsReachTheRuntime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	for _, s := range []string{"keys.dead", "keys.replayed", "keys.latest", "keys.echoes", "publishonly.events"} {
		if err := srv.AddStream(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := keys.Mount(b); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	echoes := make(chan runtime.Delivery, 1)
	_, err := runtime.Subscribe(b, "keys.echoes", func(ctx context.Context, e keys.Echo, d runtime.Delivery) runtime.Outcome {
		echoes <- d
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer b.Shutdown(context.Background())

	out, err := srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("keys.events")})
	if err != nil {
		t.Fatalf("create_if_missing did not create keys.events: %v", err)
	}
	if n := aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount); n != 3 {
		t.Errorf("keys.events has %d shards, want 3 (create_if_missing=3)", n)
	}
	// fanout=keys-app with create_if_missing registered the stream consumer.
	pushed, err := srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("keys.pushed")})
	if err != nil {
		t.Fatalf("create_if_missing did not create keys.pushed: %v", err)
	}
	cons, err := srv.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: pushed.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("keys-app")})
	if err != nil || cons.ConsumerDescription.ConsumerStatus != types.ConsumerStatusActive {
		t.Errorf("stream consumer keys-app of keys.pushed: %v, %v; want it registered and ACTIVE (fanout=keys-app)", cons, err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(srv.Subscriptions("keys.pushed")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("no SubscribeToShard subscription on keys.pushed: the subscriber does not read by fan-out")
			break
		}
	}
	// start_at is 2026-01-02T13:04:05.123Z: a record published now is after it.
	if err := runtime.NewPublisher[keys.Replayed](b, runtime.PublisherSpec{Stream: "keys.replayed"}).Publish(ctx, keys.Replayed{ID: "r1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-echoes:
		if d.PartitionKey != "reply key" {
			t.Errorf("echo keyed %q, want the mount-site key \"reply key\"", d.PartitionKey)
		}
	case <-ctx.Done():
		t.Fatal("no echo")
	}
}

// TestCreateIfMissingCreatesTheDeadLetterStream: keys.events has
// create_if_missing and dead_letter=keys.dead, so a missing keys.dead is
// created too, with one shard.
func TestCreateIfMissingCreatesTheDeadLetterStream(t *testing.T) {
	ctx, srv := connectWithRequiredStreams(t)
	out, err := srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("keys.dead")})
	if err != nil {
		t.Fatalf("keys.dead was not created: %v", err)
	}
	if n := aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount); n != 1 {
		t.Errorf("keys.dead has %d shards, want 1", n)
	}
}

// TestMissingStreamFailsConnect: a subscriber's stream that does not exist
// (no create_if_missing) fails Connect with a *runtime.Error naming it.
func TestMissingStreamFailsConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	for _, s := range []string{"keys.replayed", "publishonly.events"} {
		if err := srv.AddStream(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := keys.Mount(b); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	err := b.Connect(ctx)
	if err == nil {
		b.Shutdown(ctx)
		t.Fatal("Connect succeeded without the stream keys.latest")
	}
	var re *runtime.Error
	if !errors.As(err, &re) || !errors.Is(err, runtime.ErrStream) || !strings.Contains(err.Error(), "keys.latest") {
		t.Errorf("Connect error %v is not an ErrStream *runtime.Error naming keys.latest", err)
	}
}

// TestCreateIfMissingOnDemand: create_if_missing=on_demand creates the
// stream and its missing dead-letter stream in on-demand mode, with no
// shard count.
func TestCreateIfMissingOnDemand(t *testing.T) {
	ctx, srv := connectWithRequiredStreams(t)
	for _, s := range []string{"keys.bursts", "keys.bursts.dead"} {
		out, err := srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s)})
		if err != nil {
			t.Fatalf("%s was not created: %v", s, err)
		}
		if m := out.StreamDescriptionSummary.StreamModeDetails.StreamMode; m != types.StreamModeOnDemand {
			t.Errorf("%s is in %s mode, want ON_DEMAND", s, m)
		}
	}
}

// connectWithRequiredStreams mounts the package on an in-process Kinesis
// holding only the streams its subscribers do not create, and connects.
func connectWithRequiredStreams(t *testing.T) (context.Context, *kinesistest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	b, srv := kinesistest.NewBrokerServer()
	for _, s := range []string{"keys.replayed", "keys.latest", "publishonly.events"} {
		if err := srv.AddStream(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := keys.Mount(b); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return ctx, srv
}
