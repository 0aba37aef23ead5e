package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/kinesismock"
)

// Issue 29, defect 8, on kinesis-mock: unlike the service, which lets a
// second subscription to a shard for the same consumer take over one 5 s
// old (TestFanOutNewOwnerTakesAFrozenOwnersSubscriptionOver in
// runtime/shard), kinesis-mock refuses it (ResourceInUseException) for as
// long as the first one's connection stays open, here a frozen owner's:
// the new owner is refused past the service's 5 s, as the README says.
// Once that connection closes (the frozen process resumes and its fence
// closes it, or dies), the new owner reads the shard within seconds.
func TestFanOutFrozenOwnersSubscriptionOnKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	client, stream := kinesisMockStream(t, url, kinesismock.Transport(nil), "frozen-")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, client, stream, "")
	sum, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("billing")})
	if err != nil {
		t.Fatal(err)
	}
	for {
		d, err := client.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: reg.Consumer.ConsumerARN})
		if err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("consumer not active: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	shards, err := client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	// The frozen owner's subscription: open, never read.
	zctx, zcancel := context.WithCancel(ctx)
	defer zcancel()
	out, err := client.SubscribeToShard(zctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: reg.Consumer.ConsumerARN, ShardId: shards.Shards[0].ShardId,
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest},
	})
	if err != nil {
		t.Fatalf("SubscribeToShard: %v", err)
	}
	zombie := out.GetStream()
	subscribed := time.Now()

	got := make(chan int, 16)
	b := runtime.NewBroker(runtime.WithKinesisClient(client), runtime.WithOwnerID("b"),
		runtime.WithShardSyncInterval(200*time.Millisecond), runtime.WithLeaseRenewInterval(100*time.Millisecond),
		runtime.WithFailoverTime(2*time.Second), runtime.WithCheckpointInterval(50*time.Millisecond))
	handler := func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		got <- o.ID
		return runtime.Ack()
	}
	if _, err := runtime.Subscribe(b, stream, handler, runtime.FanOut("billing"), runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	pb := runtime.NewBroker(runtime.WithKinesisClient(client))
	if err := pb.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pb.Shutdown(context.Background()) })
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: stream})
	if err := pub.Publish(ctx, order{ID: 1, Customer: "c"}); err != nil {
		t.Fatal(err)
	}

	// Refused past the service's takeover time.
	refusedUntil := subscribed.Add(7 * time.Second)
	var readErr string
	for time.Now().Before(refusedUntil) {
		select {
		case id := <-got:
			t.Fatalf("b handled order %d %v after the frozen owner subscribed: kinesis-mock let the subscription be taken over", id, time.Since(subscribed).Round(time.Millisecond))
		case <-time.After(100 * time.Millisecond):
		}
		for _, s := range b.Status().Subscriptions {
			for _, sh := range s.Shards {
				if sh.ReadError != "" {
					readErr = sh.ReadError
				}
			}
		}
	}
	if !strings.Contains(readErr, "ResourceInUse") {
		t.Errorf("b's shard status shows read error %q, want the ResourceInUseException refusal", readErr)
	}
	// The frozen owner resumes (or dies): its connection closes.
	_ = zombie.Close()
	zcancel()
	closed := time.Now()
	select {
	case <-got:
		t.Logf("b refused for %v while the frozen owner's subscription was open; handled the order %v after it closed",
			closed.Sub(subscribed).Round(time.Millisecond), time.Since(closed).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("b handled nothing within 30 s of the frozen owner's subscription closing")
	}
}
