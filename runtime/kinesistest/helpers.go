package kinesistest

import (
	"context"
	"math/big"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// AddStream creates an ACTIVE stream with shards evenly split shards; it is
// CreateStream without the SDK ceremony, for test setup. name may be a
// stream ARN: the stream is then created in the ARN's account.
func (s *Server) AddStream(name string, shards int) error {
	ctx, name, err := s.creating(name)
	if err != nil {
		return err
	}
	_, err = s.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(shards))})
	return err
}

// AddOnDemandStream creates an ACTIVE on-demand stream (4 shards, as the
// service starts one), the kind that takes queues and AUTO placement.
// name may be a stream ARN, as for AddStream.
func (s *Server) AddOnDemandStream(name string) error {
	ctx, name, err := s.creating(name)
	if err != nil {
		return err
	}
	_, err = s.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}})
	return err
}

// creating is the context and name to create the stream a helper names by
// name or ARN with.
func (s *Server) creating(nameOrARN string) (context.Context, string, error) {
	ctx := context.Background()
	if !strings.HasPrefix(nameOrARN, "arn:") {
		return ctx, nameOrARN, nil
	}
	m := streamARNForm.FindStringSubmatch(nameOrARN)
	if m == nil || m[1] != s.cfg.region {
		return nil, "", invalidArg("%q is not a stream ARN of region %s", nameOrARN, s.cfg.region)
	}
	return AsAccount(ctx, m[2]), m[3], nil
}

// AddQueue creates a queue delivering stream's records from TRIM_HORIZON
// with attrs (nil: the service's defaults) and returns its ARN; it is
// CreateQueue without the SDK ceremony, for test setup.
func (s *Server) AddQueue(stream, name string, attrs *types.QueueAttributes) (string, error) {
	st, err := s.find(stream)
	if err != nil {
		return "", err
	}
	out, err := s.CreateQueue(context.Background(), &kinesis.CreateQueueInput{
		QueueName:       aws.String(name),
		QueueAttributes: attrs,
		StreamConfigurationList: []types.QueueStreamConfiguration{{
			StreamARN:        aws.String(st.arn(s.cfg)),
			StartingPosition: &types.QueueStartingPosition{Type: types.QueueStartingPositionTypeTrimHorizon},
		}},
	})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueDescription.QueueARN), nil
}

// SplitInHalf splits an open shard at the middle of its hash-key range, the
// usual way to double a stream's capacity.
func (s *Server) SplitInHalf(stream, shardID string) error {
	st, err := s.find(stream)
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
	st, err := s.find(stream)
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

// Streams returns the names of the existing streams, sorted; a stream of
// another account than the server's is ACCOUNT/NAME.
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

// QueueCounts is what a queue holds, by delivery state.
type QueueCounts struct {
	Visible      int // live records a receive would return now
	InFlight     int // live records received and not yet acknowledged nor visible again
	DeadLetters  int // dead letters not in flight
	DeadInFlight int // dead letters received and held
}

// QueueCounts counts a queue's records by state (records written since
// the last receive included), without receiving any; ok is false when no
// queue has the ARN. Tests use it to see what a consumer left behind: in
// flight at shutdown, or dead letters.
func (s *Server) QueueCounts(queueARN string) (QueueCounts, bool) {
	s.mu.RLock()
	q := s.queues[queueARN]
	s.mu.RUnlock()
	if q == nil {
		return QueueCounts{}, false
	}
	now := s.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	s.ingestLocked(q, now)
	q.expireLocked(laneNormal, now)
	q.expireLocked(laneDead, now)
	var c QueueCounts
	for _, e := range q.entries {
		switch {
		case e.lane == laneNormal && e.inflight:
			c.InFlight++
		case e.lane == laneNormal:
			c.Visible++
		case e.inflight:
			c.DeadInFlight++
		default:
			c.DeadLetters++
		}
	}
	return c, true
}
