package kinesistest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// As returns the server acting for another account (12 digits): every call
// runs with AsAccount, so StreamName and CreateStream are that account's
// and queues it creates are its own. Tests use it for a runtime, or a
// producer, of another account sharing streams by ARN.
func (s *Server) As(account string) kinesisapi.API { return accountView{s, account} }

type accountView struct {
	s       *Server
	account string
}

func (v accountView) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	return v.s.CreateStream(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DeleteStream(ctx context.Context, in *kinesis.DeleteStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error) {
	return v.s.DeleteStream(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return v.s.DescribeStreamSummary(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return v.s.ListShards(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	return v.s.PutRecord(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	return v.s.PutRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return v.s.GetShardIterator(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return v.s.GetRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) SplitShard(ctx context.Context, in *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error) {
	return v.s.SplitShard(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) MergeShards(ctx context.Context, in *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error) {
	return v.s.MergeShards(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return v.s.RegisterStreamConsumer(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return v.s.DescribeStreamConsumer(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) ListStreamConsumers(ctx context.Context, in *kinesis.ListStreamConsumersInput, optFns ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	return v.s.ListStreamConsumers(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error) {
	return v.s.DeregisterStreamConsumer(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	return v.s.SubscribeToShard(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) UpdateMaxRecordSize(ctx context.Context, in *kinesis.UpdateMaxRecordSizeInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateMaxRecordSizeOutput, error) {
	return v.s.UpdateMaxRecordSize(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) UpdateStreamRecordDistributionStrategy(ctx context.Context, in *kinesis.UpdateStreamRecordDistributionStrategyInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateStreamRecordDistributionStrategyOutput, error) {
	return v.s.UpdateStreamRecordDistributionStrategy(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) CreateQueue(ctx context.Context, in *kinesis.CreateQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateQueueOutput, error) {
	return v.s.CreateQueue(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DescribeQueue(ctx context.Context, in *kinesis.DescribeQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeQueueOutput, error) {
	return v.s.DescribeQueue(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) ListQueues(ctx context.Context, in *kinesis.ListQueuesInput, optFns ...func(*kinesis.Options)) (*kinesis.ListQueuesOutput, error) {
	return v.s.ListQueues(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) UpdateQueue(ctx context.Context, in *kinesis.UpdateQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateQueueOutput, error) {
	return v.s.UpdateQueue(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) DeleteQueue(ctx context.Context, in *kinesis.DeleteQueueInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteQueueOutput, error) {
	return v.s.DeleteQueue(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) ReceiveQueueRecords(ctx context.Context, in *kinesis.ReceiveQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.ReceiveQueueRecordsOutput, error) {
	return v.s.ReceiveQueueRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error) {
	return v.s.AcknowledgeQueueRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) UpdateQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateQueueRecordsVisibilityInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateQueueRecordsVisibilityOutput, error) {
	return v.s.UpdateQueueRecordsVisibility(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) ReceiveDeadLetterQueueRecords(ctx context.Context, in *kinesis.ReceiveDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.ReceiveDeadLetterQueueRecordsOutput, error) {
	return v.s.ReceiveDeadLetterQueueRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) AcknowledgeDeadLetterQueueRecords(ctx context.Context, in *kinesis.AcknowledgeDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.AcknowledgeDeadLetterQueueRecordsOutput, error) {
	return v.s.AcknowledgeDeadLetterQueueRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) RestoreDeadLetterQueueRecords(ctx context.Context, in *kinesis.RestoreDeadLetterQueueRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.RestoreDeadLetterQueueRecordsOutput, error) {
	return v.s.RestoreDeadLetterQueueRecords(AsAccount(ctx, v.account), in, optFns...)
}

func (v accountView) UpdateDeadLetterQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateDeadLetterQueueRecordsVisibilityInput, optFns ...func(*kinesis.Options)) (*kinesis.UpdateDeadLetterQueueRecordsVisibilityOutput, error) {
	return v.s.UpdateDeadLetterQueueRecordsVisibility(AsAccount(ctx, v.account), in, optFns...)
}

// WaitForRecords is the server's: an iterator names its stream whatever
// the account.
func (v accountView) WaitForRecords(ctx context.Context, shardIterator string) error {
	return v.s.WaitForRecords(ctx, shardIterator)
}
