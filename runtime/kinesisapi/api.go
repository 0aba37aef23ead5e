// Package kinesisapi names the subset of the Kinesis service that the runtime
// calls, in the SDK's own method signatures, so that *kinesis.Client and the
// in-process backend (runtime/kinesistest) are interchangeable.
package kinesisapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// API is satisfied by *kinesis.Client.
type API interface {
	CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	DeleteStream(ctx context.Context, in *kinesis.DeleteStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	PutRecord(ctx context.Context, in *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error)
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
	SplitShard(ctx context.Context, in *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error)
	MergeShards(ctx context.Context, in *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error)

	// Enhanced fan-out: stream consumers and the subscriptions that push a
	// shard's records to one of them over HTTP/2.
	RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	ListStreamConsumers(ctx context.Context, in *kinesis.ListStreamConsumersInput, optFns ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error)
	DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error)

	// Stream settings: the largest record a stream takes (1 to 10 MiB) and
	// how an on-demand stream places records (AUTO ignores keys).
	UpdateMaxRecordSize(ctx context.Context, in *kinesis.UpdateMaxRecordSizeInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateMaxRecordSizeOutput, error)
	UpdateStreamRecordDistributionStrategy(ctx context.Context, in *kinesis.UpdateStreamRecordDistributionStrategyInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateStreamRecordDistributionStrategyOutput, error)

	// Queues on on-demand streams: per-record delivery with visibility
	// timeouts and built-in dead letters, named by queue ARN.
	CreateQueue(ctx context.Context, in *kinesis.CreateQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateQueueOutput, error)
	DescribeQueue(ctx context.Context, in *kinesis.DescribeQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeQueueOutput, error)
	ListQueues(ctx context.Context, in *kinesis.ListQueuesInput, optFns ...func(*kinesis.Options)) (*kinesis.ListQueuesOutput, error)
	UpdateQueue(ctx context.Context, in *kinesis.UpdateQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateQueueOutput, error)
	DeleteQueue(ctx context.Context, in *kinesis.DeleteQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteQueueOutput, error)
	ReceiveQueueRecords(ctx context.Context, in *kinesis.ReceiveQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.ReceiveQueueRecordsOutput, error)
	AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error)
	UpdateQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateQueueRecordsVisibilityInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateQueueRecordsVisibilityOutput, error)
	ReceiveDeadLetterQueueRecords(ctx context.Context, in *kinesis.ReceiveDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.ReceiveDeadLetterQueueRecordsOutput, error)
	AcknowledgeDeadLetterQueueRecords(ctx context.Context, in *kinesis.AcknowledgeDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.AcknowledgeDeadLetterQueueRecordsOutput, error)
	RestoreDeadLetterQueueRecords(ctx context.Context, in *kinesis.RestoreDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.RestoreDeadLetterQueueRecordsOutput, error)
	UpdateDeadLetterQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateDeadLetterQueueRecordsVisibilityInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateDeadLetterQueueRecordsVisibilityOutput, error)
}

var _ API = (*kinesis.Client)(nil)
