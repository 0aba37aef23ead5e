package kinesistest

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The operations an Endpoint serves beyond kinesisapi.API, for the tools
// people point at a local Kinesis first (the AWS CLI's list-streams and
// describe-stream, boto3 scripts, older KCLs): built from Streams,
// DescribeStreamSummary and ListShards, so faults and counters apply as
// to those.
var endpointOperations = map[string]operation{
	"ListStreams":    op(listStreams),
	"DescribeStream": op(describeStream),
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
