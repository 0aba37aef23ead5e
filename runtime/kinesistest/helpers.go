package kinesistest

import (
	"context"
	"math/big"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// AddStream creates an ACTIVE stream with shards evenly split shards; it is
// CreateStream without the SDK ceremony, for test setup.
func (s *Server) AddStream(name string, shards int) error {
	_, err := s.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(shards))})
	return err
}

// SetRecordDistribution switches an on-demand stream's record distribution
// strategy (UpdateStreamRecordDistributionStrategy without the ceremony):
// with auto, new records are spread over the open shards, keys ignored;
// stored records stay where they are.
func (s *Server) SetRecordDistribution(stream string, auto bool) error {
	st, err := s.lookup(stream)
	if err != nil {
		return err
	}
	if st.mode != types.StreamModeOnDemand {
		return invalidArg("stream %s is not in ON_DEMAND mode", stream)
	}
	st.auto.Store(auto)
	return nil
}

// SplitInHalf splits an open shard at the middle of its hash-key range, the
// usual way to double a stream's capacity.
func (s *Server) SplitInHalf(stream, shardID string) error {
	st, err := s.lookup(stream)
	if err != nil {
		return err
	}
	sh := st.shardByID(shardID)
	if sh == nil {
		return notFound("Could not find shard %s in stream %s under account %s.", shardID, stream, s.cfg.account)
	}
	mid := new(big.Int).Add(sh.start.big(), sh.end.big())
	mid.Rsh(mid, 1)
	mid.Add(mid, big.NewInt(1))
	_, err = s.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String(shardID), NewStartingHashKey: aws.String(mid.String())})
	return err
}

// StoredRecord is a record as the server keeps it, with its shard.
type StoredRecord struct {
	ShardID string
	types.Record
}

// Records returns every record the stream still retains, shard by shard in
// shard-index order and in sequence order within a shard, without counting
// as a read. Tests use it to see what was published (a dead-letter stream,
// say) without running a consumer.
func (s *Server) Records(stream string) ([]StoredRecord, error) {
	st, err := s.lookup(stream)
	if err != nil {
		return nil, err
	}
	cutoff := s.now().Add(-s.cfg.retention)
	var out []StoredRecord
	for _, sh := range *st.all.Load() {
		sh.mu.Lock()
		sh.log.trim(cutoff)
		segs := sh.log.segments(0, sh.log.len())
		sh.mu.Unlock()
		for _, r := range concat(segs) {
			arrival := time.Unix(0, r.arrival).UTC()
			out = append(out, StoredRecord{ShardID: sh.id, Record: types.Record{
				Data:                        clone(r.data()),
				PartitionKey:                aws.String(r.key()),
				SequenceNumber:              aws.String(formatSeq(r.counter, sh.index)),
				ApproximateArrivalTimestamp: &arrival,
				EncryptionType:              types.EncryptionTypeNone,
			}})
		}
	}
	return out, nil
}

// Streams returns the names of the existing streams, sorted.
func (s *Server) Streams() []string {
	s.mu.RLock()
	out := make([]string, 0, len(s.streams))
	for name := range s.streams {
		out = append(out, name)
	}
	s.mu.RUnlock()
	sort.Strings(out)
	return out
}

func concat(segs [][]record) []record {
	if len(segs) == 1 {
		return segs[0]
	}
	var out []record
	for _, s := range segs {
		out = append(out, s...)
	}
	return out
}
