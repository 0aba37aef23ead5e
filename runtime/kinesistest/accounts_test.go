package kinesistest_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// Another account's stream is reached by its ARN, in process and over
// HTTP; its name alone names the caller's own stream; an ARN of another
// region is not found and a malformed one is a ValidationException.
func TestStreamsOfOtherAccounts(t *testing.T) {
	const other = "111122223333"
	s := kinesistest.New()
	h := kinesistest.NewHTTPServer(s)
	t.Cleanup(h.Close)
	for _, c := range []struct {
		name       string
		home, them kinesisapi.API
		themCtx    func(context.Context) context.Context
	}{
		{"in process", s, s, func(ctx context.Context) context.Context { return kinesistest.AsAccount(ctx, other) }},
		{"HTTP", h.Client(), h.ClientAs(other), func(ctx context.Context) context.Context { return ctx }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			name := "shared-" + c.name[:2]
			if _, err := c.them.CreateStream(c.themCtx(ctx), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
				t.Fatal(err)
			}
			arn := "arn:aws:kinesis:us-east-1:" + other + ":stream/" + name
			d, err := c.home.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamARN: &arn})
			if err != nil || aws.ToString(d.StreamDescriptionSummary.StreamARN) != arn {
				t.Fatalf("DescribeStreamSummary by the other account's ARN: %v, %+v", err, d)
			}
			_, err = c.home.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
			wantAs[*types.ResourceNotFoundException](t, "the other account's stream by name", err)
			p, err := c.home.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: &arn, PartitionKey: aws.String("k"), Data: []byte("hello")})
			if err != nil {
				t.Fatal(err)
			}
			it, err := c.home.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamARN: &arn, ShardId: p.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.home.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, StreamARN: &arn})
			if err != nil || len(got.Records) != 1 || string(got.Records[0].Data) != "hello" {
				t.Fatalf("GetRecords by ARN: %v, %+v", err, got)
			}
			west := "arn:aws:kinesis:us-west-2:" + other + ":stream/" + name
			_, err = c.home.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, StreamARN: &west})
			wantAs[*types.ResourceNotFoundException](t, "GetRecords with an ARN of another region", err)
			ours := "arn:aws:kinesis:us-east-1:000000000000:stream/" + name
			_, err = c.home.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, StreamARN: &ours})
			wantAs[*types.InvalidArgumentException](t, "GetRecords with the ARN of another stream than the iterator's", err)
			_, err = c.home.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: &west, PartitionKey: aws.String("k"), Data: []byte("x")})
			wantAs[*types.ResourceNotFoundException](t, "an ARN of another region", err)
			_, err = c.home.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: aws.String("arn:aws:kinesis:us-east-1:12:stream/" + name), PartitionKey: aws.String("k"), Data: []byte("x")})
			wantAs[*types.ValidationException](t, "a malformed ARN", err)
			_, err = c.home.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name), StreamARN: &arn})
			wantAs[*types.InvalidArgumentException](t, "a StreamName of another stream than the StreamARN's", err)
		})
	}
}

// A fan-out consumer and a queue of one account on another account's
// stream, by its ARN.
func TestConsumerAndQueueOnOtherAccountsStream(t *testing.T) {
	const other = "111122223333"
	ctx := testCtx(t)
	s := kinesistest.New()
	them := s.As(other)
	arn := "arn:aws:kinesis:us-east-1:" + other + ":stream/orders"
	if err := s.AddOnDemandStream(arn); err != nil {
		t.Fatal(err)
	}
	if got := s.Streams(); len(got) != 1 || got[0] != other+"/orders" {
		t.Fatalf("Streams() = %v, want [%s/orders]", got, other)
	}
	reg, err := s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &arn, ConsumerName: aws.String("billing")})
	if err != nil {
		t.Fatal(err)
	}
	carn := aws.ToString(reg.Consumer.ConsumerARN)
	if want := arn + "/consumer/billing:"; len(carn) <= len(want) || carn[:len(want)] != want {
		t.Fatalf("consumer ARN %s, want it under %s", carn, arn)
	}
	q, err := s.CreateQueue(ctx, &kinesis.CreateQueueInput{QueueName: aws.String("work"), StreamConfigurationList: []types.QueueStreamConfiguration{{StreamARN: &arn}}})
	if err != nil {
		t.Fatal(err)
	}
	qarn := aws.ToString(q.QueueDescription.QueueARN)
	if want := "arn:aws:kinesis:us-east-1:000000000000:queue/"; qarn[:len(want)] != want {
		t.Errorf("queue ARN %s, want one of the creator's account", qarn)
	}
	p, err := them.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("k"), Data: []byte("o1")})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := s.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &carn, ShardId: p.ShardId, StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}})
	if err != nil {
		t.Fatal(err)
	}
	es := sub.GetStream()
	defer es.Close()
	ev := <-es.Events()
	if e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); !ok || len(e.Value.Records) != 1 || string(e.Value.Records[0].Data) != "o1" {
		t.Fatalf("subscription event %#v", ev)
	}
	out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &qarn, WaitTimeSeconds: aws.Int32(0)})
	if err != nil || len(out.QueueRecords) != 1 || string(out.QueueRecords[0].Data) != "o1" {
		t.Fatalf("the queue on the other account's stream: %v, %+v", err, out)
	}
	// The owner lists no queue of ours; we list ours.
	if l, _ := them.ListQueues(ctx, &kinesis.ListQueuesInput{}); len(l.QueueSummaries) != 0 {
		t.Errorf("the stream's owner lists %d queues of another account", len(l.QueueSummaries))
	}
	if l, _ := s.ListQueues(ctx, &kinesis.ListQueuesInput{}); len(l.QueueSummaries) != 1 {
		t.Errorf("the queue's account lists %d queues", len(l.QueueSummaries))
	}
}
