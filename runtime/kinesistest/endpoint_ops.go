package kinesistest

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
)

// The operations an Endpoint serves beyond kinesisapi.API, for the tools
// people point at a local Kinesis first (the AWS CLI's list-streams,
// describe-stream and update-shard-count, boto3 scripts, older KCLs):
// built from Streams, DescribeStreamSummary, ListShards, SplitShard and
// MergeShards, so faults and counters apply as to those.
var endpointOperations = map[string]operation{
	"ListStreams":      op(listStreams),
	"DescribeStream":   op(describeStream),
	"UpdateShardCount": op(updateShardCount),
}

// withEndpointOperations answers the endpoint's own operations and hands
// every other request to next.
func withEndpointOperations(s *Server, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, _ := strings.CutPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
		f := endpointOperations[name]
		if f == nil || r.Method != http.MethodPost {
			next(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		out, err := f(r.Context(), s, body)
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write(encodeOutput(nil, out))
	}
}

func invalid(msg string) error {
	return &types.InvalidArgumentException{Message: aws.String(msg)}
}

// listStreams lists the streams in name order, Limit (default 100, at most
// 10,000) a page, after ExclusiveStartStreamName or the NextToken of the
// page before (the last name it listed).
func listStreams(s *Server, ctx context.Context, in *kinesis.ListStreamsInput, _ ...func(*kinesis.Options)) (*kinesis.ListStreamsOutput, error) {
	limit := int(aws.ToInt32(in.Limit))
	switch {
	case in.Limit == nil:
		limit = 100
	case limit < 1 || limit > 10000:
		return nil, invalid("Limit must be between 1 and 10000.")
	}
	after := aws.ToString(in.ExclusiveStartStreamName)
	if in.NextToken != nil {
		after = *in.NextToken
	}
	names := s.Streams()
	start, _ := slices.BinarySearch(names, after)
	if start < len(names) && names[start] == after {
		start++
	}
	out := &kinesis.ListStreamsOutput{StreamNames: []string{}, StreamSummaries: []types.StreamSummary{}}
	for _, name := range names[start:] {
		if len(out.StreamNames) == limit {
			out.HasMoreStreams = aws.Bool(true)
			out.NextToken = aws.String(out.StreamNames[limit-1])
			break
		}
		d, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			continue // deleted meanwhile
		}
		sum := d.StreamDescriptionSummary
		out.StreamNames = append(out.StreamNames, name)
		out.StreamSummaries = append(out.StreamSummaries, types.StreamSummary{
			StreamName: sum.StreamName, StreamARN: sum.StreamARN, StreamStatus: sum.StreamStatus,
			StreamModeDetails: sum.StreamModeDetails, StreamCreationTimestamp: sum.StreamCreationTimestamp,
		})
	}
	if out.HasMoreStreams == nil {
		out.HasMoreStreams = aws.Bool(false)
	}
	return out, nil
}

// describeStream is DescribeStreamSummary with the stream's shards, Limit
// (default 100, at most 10,000) of them after ExclusiveStartShardId.
func describeStream(s *Server, ctx context.Context, in *kinesis.DescribeStreamInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamOutput, error) {
	limit := int(aws.ToInt32(in.Limit))
	switch {
	case in.Limit == nil:
		limit = 100
	case limit < 1 || limit > 10000:
		return nil, invalid("Limit must be between 1 and 10000.")
	}
	d, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: in.StreamName, StreamARN: in.StreamARN})
	if err != nil {
		return nil, err
	}
	sum := d.StreamDescriptionSummary
	var shards []types.Shard
	lin := &kinesis.ListShardsInput{StreamName: sum.StreamName, ExclusiveStartShardId: in.ExclusiveStartShardId}
	for {
		page, err := s.ListShards(ctx, lin)
		if err != nil {
			return nil, err
		}
		shards = append(shards, page.Shards...)
		if page.NextToken == nil || len(shards) > limit {
			break
		}
		lin = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
	more := len(shards) > limit
	if more {
		shards = shards[:limit]
	}
	if shards == nil {
		shards = []types.Shard{}
	}
	return &kinesis.DescribeStreamOutput{StreamDescription: &types.StreamDescription{
		StreamName:              sum.StreamName,
		StreamARN:               sum.StreamARN,
		StreamStatus:            sum.StreamStatus,
		StreamModeDetails:       sum.StreamModeDetails,
		StreamCreationTimestamp: sum.StreamCreationTimestamp,
		RetentionPeriodHours:    sum.RetentionPeriodHours,
		EncryptionType:          sum.EncryptionType,
		KeyId:                   sum.KeyId,
		EnhancedMonitoring:      append([]types.EnhancedMetrics{}, sum.EnhancedMonitoring...),
		Shards:                  shards,
		HasMoreShards:           aws.Bool(more),
	}}, nil
}

// updateShardCount reshards a stream to TargetShardCount shards of even
// hash-key ranges (UNIFORM_SCALING), at once, between half and twice the
// open shards as on the service. The ranges are the service's; the lineage
// is not: the open shards are merged into one, which is split evenly, so a
// reader goes through a chain of parents (each read to its end first, as
// on any reshard).
func updateShardCount(s *Server, ctx context.Context, in *kinesis.UpdateShardCountInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateShardCountOutput, error) {
	if in.ScalingType != types.ScalingTypeUniformScaling {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "1 validation error detected: Value at 'scalingType' failed to satisfy constraint: Member must satisfy enum value set: [UNIFORM_SCALING]"}
	}
	d, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: in.StreamName, StreamARN: in.StreamARN})
	if err != nil {
		return nil, err
	}
	sum := d.StreamDescriptionSummary
	name, open := sum.StreamName, int(aws.ToInt32(sum.OpenShardCount))
	target := int(aws.ToInt32(in.TargetShardCount))
	if in.TargetShardCount == nil || target < 1 {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "1 validation error detected: Value at 'targetShardCount' failed to satisfy constraint: Member must have value greater than or equal to 1"}
	}
	if target > 2*open || 2*target < open {
		return nil, invalid(fmt.Sprintf("UpdateShardCount from %d to %d shards: the target must be between half and twice the open shards.", open, target))
	}
	out := &kinesis.UpdateShardCountOutput{StreamName: name, StreamARN: sum.StreamARN, CurrentShardCount: aws.Int32(int32(open)), TargetShardCount: aws.Int32(int32(target))}
	if target == open {
		return out, nil
	}
	openShards := func() ([]types.Shard, error) {
		var shards []types.Shard
		lin := &kinesis.ListShardsInput{StreamName: name, ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}}
		for {
			page, err := s.ListShards(ctx, lin)
			if err != nil {
				return nil, err
			}
			shards = append(shards, page.Shards...)
			if page.NextToken == nil {
				break
			}
			lin = &kinesis.ListShardsInput{NextToken: page.NextToken}
		}
		slices.SortFunc(shards, func(a, b types.Shard) int { return hashStart(a).Cmp(hashStart(b)) })
		return shards, nil
	}
	shards, err := openShards()
	for err == nil && len(shards) > 1 {
		_, err = s.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: name, ShardToMerge: shards[0].ShardId, AdjacentShardToMerge: shards[1].ShardId})
		if err == nil {
			shards, err = openShards()
		}
	}
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	for i := 1; err == nil && i < target; i++ {
		at := new(big.Int).Div(new(big.Int).Mul(space, big.NewInt(int64(i))), big.NewInt(int64(target)))
		last := shards[len(shards)-1]
		_, err = s.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: name, ShardToSplit: last.ShardId, NewStartingHashKey: aws.String(at.String())})
		if err == nil {
			shards, err = openShards()
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func hashStart(sh types.Shard) *big.Int {
	n, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
	return n
}
