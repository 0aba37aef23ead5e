package shard

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// userRecords hands each user record that r carries to emit, in order.
//
// INTEGRATION POINT (runtime/kpl, H2): KPL-aggregated records are to be
// expanded here with kpl.Deaggregate, each sub-record with its own partition
// key and SubSequence (its index in the aggregate). Until that package
// lands, every Kinesis record is one user record with SubSequence 0; the
// watermark, checkpoints (checkpointSubSequenceNumber) and resume (reopen AT
// the checkpointed sequence and skip sub-records up to its SubSequence)
// already handle sub-records.
func userRecords(r *types.Record, emit func(seq string, sub int64, key string, data []byte) error) error {
	return emit(aws.ToString(r.SequenceNumber), 0, aws.ToString(r.PartitionKey), r.Data)
}
