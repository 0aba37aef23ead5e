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
			_, err = c.home.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: &west, PartitionKey: aws.String("k"), Data: []byte("x")})
			wantAs[*types.ResourceNotFoundException](t, "an ARN of another region", err)
			_, err = c.home.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: aws.String("arn:aws:kinesis:us-east-1:12:stream/" + name), PartitionKey: aws.String("k"), Data: []byte("x")})
			wantAs[*types.ValidationException](t, "a malformed ARN", err)
			_, err = c.home.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name), StreamARN: &arn})
			wantAs[*types.InvalidArgumentException](t, "a StreamName of another stream than the StreamARN's", err)
		})
	}
}
