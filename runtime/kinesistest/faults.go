package kinesistest

import "errors"

// Op names a Kinesis operation for fault injection and call counters.
type Op int

// The operations of kinesisapi.API.
const (
	OpCreateStream Op = iota
	OpDeleteStream
	OpDescribeStreamSummary
	OpListShards
	OpPutRecord
	OpPutRecords
	OpGetShardIterator
	OpGetRecords
	OpSplitShard
	OpMergeShards
	OpRegisterStreamConsumer
	OpDescribeStreamConsumer
	OpListStreamConsumers
	OpDeregisterStreamConsumer
	OpSubscribeToShard
	OpUpdateMaxRecordSize
	OpUpdateStreamRecordDistributionStrategy
	OpCreateQueue
	OpDescribeQueue
	OpListQueues
	OpUpdateQueue
	OpDeleteQueue
	OpReceiveQueueRecords
	OpAcknowledgeQueueRecords
	OpUpdateQueueRecordsVisibility
	OpReceiveDeadLetterQueueRecords
	OpAcknowledgeDeadLetterQueueRecords
	OpRestoreDeadLetterQueueRecords
	OpUpdateDeadLetterQueueRecordsVisibility
	opCount
)

var opNames = [opCount]string{"CreateStream", "DeleteStream", "DescribeStreamSummary", "ListShards", "PutRecord", "PutRecords", "GetShardIterator", "GetRecords", "SplitShard", "MergeShards",
	"RegisterStreamConsumer", "DescribeStreamConsumer", "ListStreamConsumers", "DeregisterStreamConsumer", "SubscribeToShard",
	"UpdateMaxRecordSize", "UpdateStreamRecordDistributionStrategy",
	"CreateQueue", "DescribeQueue", "ListQueues", "UpdateQueue", "DeleteQueue", "ReceiveQueueRecords", "AcknowledgeQueueRecords", "UpdateQueueRecordsVisibility",
	"ReceiveDeadLetterQueueRecords", "AcknowledgeDeadLetterQueueRecords", "RestoreDeadLetterQueueRecords", "UpdateDeadLetterQueueRecordsVisibility"}

func (o Op) String() string {
	if o < 0 || o >= opCount {
		return "Op(?)"
	}
	return opNames[o]
}

// Call describes one incoming call to a fault hook. Stream is empty when the
// request names none (a ListShards NextToken); Shard is set for
// GetShardIterator, GetRecords, SplitShard, MergeShards and
// SubscribeToShard; Consumer (the stream consumer's name) for the consumer
// operations and SubscribeToShard, when the request names one; Queue (the
// queue's name) for the queue operations, once the queue is found.
//
// A hook that returns, say, a *types.ResourceInUseException or a
// *types.LimitExceededException for OpSubscribeToShard refuses a
// subscription the way the service does when another subscription holds
// the shard or the one-per-second limit is hit.
type Call struct {
	Op       Op
	Stream   string
	Shard    string
	Consumer string
	Queue    string
}

// errMalformed is the cause reported for undecodable tokens.
var errMalformed = errors.New("malformed token")

// errStreamReset is what the in-process client reads from a subscription
// reset by ResetSubscriptions (over HTTP/2 the transport reports its own).
var errStreamReset = errors.New("kinesistest: stream reset by the server (RST_STREAM INTERNAL_ERROR)")

// errNotSubscribe is the in-process HTTP client's answer to any request
// but the SubscribeToShard it was made for.
var errNotSubscribe = errors.New("kinesistest: the in-process HTTP client serves only SubscribeToShard")

// InjectCallFault makes every call for which f returns an error fail with
// that error (wrapped like an SDK operation error, so errors.As still finds,
// say, a *types.ProvisionedThroughputExceededException). The call has no
// effect and its iterator, if any, stays usable. nil removes the hook. f runs
// on the caller's goroutine, outside the server's locks.
func (s *Server) InjectCallFault(f func(Call) error) {
	if f == nil {
		s.callFault.Store(nil)
		return
	}
	s.callFault.Store(&f)
}

// InjectPutFault makes each PutRecords entry (and each PutRecord) for which
// f returns an error fail without being stored. PutRecords reports it in the
// entry's ErrorCode (the error's smithy ErrorCode, else "InternalFailure")
// and ErrorMessage and counts it in FailedRecordCount; PutRecord returns the
// error. nil removes the hook.
func (s *Server) InjectPutFault(f func(stream, partitionKey string) error) {
	if f == nil {
		s.putFault.Store(nil)
		return
	}
	s.putFault.Store(&f)
}

// Calls returns how many calls of op the server has received.
func (s *Server) Calls(op Op) int64 { return s.calls[op].Load() }

// ShardStats counts the traffic of one shard.
type ShardStats struct {
	GetRecords      int64 // GetRecords calls answered for the shard
	EmptyGetRecords int64 // of which returned no records
	Puts            int64 // records stored
}

// ShardStats returns the counters of a shard; ok is false when the stream or
// shard does not exist.
func (s *Server) ShardStats(stream, shardID string) (ShardStats, bool) {
	st, err := s.find(stream)
	if err != nil {
		return ShardStats{}, false
	}
	sh := st.shardByID(shardID)
	if sh == nil {
		return ShardStats{}, false
	}
	return ShardStats{GetRecords: sh.getCalls.Load(), EmptyGetRecords: sh.emptyGets.Load(), Puts: sh.putCount.Load()}, true
}
