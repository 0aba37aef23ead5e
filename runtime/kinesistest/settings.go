package kinesistest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The range of a stream's MaxRecordSizeInKiB, and its default where the
// service says nothing (the 1 MiB of every stream before the setting).
const (
	minRecordKiB     = 1024
	maxRecordKiB     = 10240
	defaultRecordKiB = 1024
)

func validRecordKiB(v *int32) error {
	if v != nil && (*v < minRecordKiB || *v > maxRecordKiB) {
		return validation("1 validation error detected: Value '%d' at 'maxRecordSizeInKiB' failed to satisfy constraint: Member must have value between %d and %d", *v, minRecordKiB, maxRecordKiB)
	}
	return nil
}

// validStrategy checks CreateStream's RecordDistributionStrategy for a
// stream of mode; the SDK says AUTO on a provisioned stream is an
// InvalidArgumentException.
func validStrategy(d types.RecordDistributionStrategy, mode types.StreamMode) error {
	switch d {
	case "", types.RecordDistributionStrategyUserPartitionKey:
		return nil
	case types.RecordDistributionStrategyAuto:
		if mode != types.StreamModeOnDemand {
			return invalidArg("The record distribution strategy AUTO is supported only for streams in ON_DEMAND capacity mode.")
		}
		return nil
	}
	return validation("1 validation error detected: Value '%s' at 'recordDistributionStrategy' failed to satisfy constraint: Member must satisfy enum value set: %v", d, types.RecordDistributionStrategy("").Values())
}

// strategy is the stream's record distribution strategy as
// DescribeStreamSummary reports it: only for on-demand streams.
func (st *stream) strategy() types.RecordDistributionStrategy {
	switch {
	case st.mode != types.StreamModeOnDemand:
		return ""
	case st.auto.Load():
		return types.RecordDistributionStrategyAuto
	}
	return types.RecordDistributionStrategyUserPartitionKey
}

// recordLimit is the stream's limit on one record's data plus partition key.
func (st *stream) recordLimit() int { return int(st.maxRecordKiB.Load()) << 10 }

// UpdateMaxRecordSize sets the largest record the stream takes, 1024 to
// 10240 KiB; it applies at once (the service's update is asynchronous).
func (s *Server) UpdateMaxRecordSize(ctx context.Context, in *kinesis.UpdateMaxRecordSizeInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateMaxRecordSizeOutput, error) {
	const op = OpUpdateMaxRecordSize
	name, err := s.beginStream(ctx, op, nil, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	if in.MaxRecordSizeInKiB == nil {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'maxRecordSizeInKiB' failed to satisfy constraint: Member must not be null"))
	}
	if err := validRecordKiB(in.MaxRecordSizeInKiB); err != nil {
		return nil, opError(op.String(), err)
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	st.maxRecordKiB.Store(*in.MaxRecordSizeInKiB)
	return &kinesis.UpdateMaxRecordSizeOutput{}, nil
}

// UpdateStreamRecordDistributionStrategy switches an on-demand stream
// between AUTO and USER_PARTITION_KEY; records appended from then on are
// placed by the new strategy.
func (s *Server) UpdateStreamRecordDistributionStrategy(ctx context.Context, in *kinesis.UpdateStreamRecordDistributionStrategyInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateStreamRecordDistributionStrategyOutput, error) {
	const op = OpUpdateStreamRecordDistributionStrategy
	if in.StreamARN == nil || *in.StreamARN == "" {
		s.calls[op].Add(1)
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'streamARN' failed to satisfy constraint: Member must not be null"))
	}
	name, err := s.beginStream(ctx, op, nil, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	if in.RecordDistributionStrategy == "" {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'recordDistributionStrategy' failed to satisfy constraint: Member must not be null"))
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	if err := validStrategy(in.RecordDistributionStrategy, st.mode); err != nil {
		return nil, opError(op.String(), err)
	}
	if st.mode != types.StreamModeOnDemand {
		// The operation is only for on-demand streams, whatever the value.
		return nil, opError(op.String(), invalidArg("The record distribution strategy is supported only for streams in ON_DEMAND capacity mode."))
	}
	st.auto.Store(in.RecordDistributionStrategy == types.RecordDistributionStrategyAuto)
	return &kinesis.UpdateStreamRecordDistributionStrategyOutput{}, nil
}
