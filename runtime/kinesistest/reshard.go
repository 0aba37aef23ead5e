package kinesistest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// SplitShard closes a shard and opens two children at once (the service
// takes seconds; tests want the result): [start, NewStartingHashKey-1] and
// [NewStartingHashKey, end]. The parent keeps its records until retention.
func (s *Server) SplitShard(ctx context.Context, in *kinesis.SplitShardInput, _ ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error) {
	const op = OpSplitShard
	shardArg := aws.ToString(in.ShardToSplit)
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, shardArg)
	if err != nil {
		return nil, err
	}
	if in.NewStartingHashKey == nil {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'newStartingHashKey' failed to satisfy constraint: Member must not be null"))
	}
	at, err := parseHashKey(*in.NewStartingHashKey)
	if err != nil {
		return nil, opError(op.String(), invalidArg("NewStartingHashKey: %v", err))
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	parent, err := s.openShard(st, shardArg)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	if !parent.start.inc().less(at) || !at.less(parent.end) {
		return nil, opError(op.String(), invalidArg("NewStartingHashKey %s used in SplitShard() on shard %s in stream %s under account %s is not both greater than one plus the shard's StartingHashKey %s and less than the shard's EndingHashKey %s.",
			at, parent.id, name, s.cfg.account, parent.start, parent.end))
	}
	if len(*st.open.Load())+1 > s.cfg.shardLimit {
		return nil, opError(op.String(), limitExceeded("This request would exceed the shard limit for the account %s in %s. Limit: %d.", s.cfg.account, s.cfg.region, s.cfg.shardLimit))
	}
	s.reshard([]*shard{parent}, st, [][2]hashKey{{parent.start, at.dec()}, {at, parent.end}})
	return &kinesis.SplitShardOutput{}, nil
}

// MergeShards closes two adjacent shards and opens one child covering both
// ranges, with ParentShardId = ShardToMerge and AdjacentParentShardId =
// AdjacentShardToMerge.
func (s *Server) MergeShards(ctx context.Context, in *kinesis.MergeShardsInput, _ ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error) {
	const op = OpMergeShards
	shardArg, adjArg := aws.ToString(in.ShardToMerge), aws.ToString(in.AdjacentShardToMerge)
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, shardArg)
	if err != nil {
		return nil, err
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	a, err := s.openShard(st, shardArg)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	b, err := s.openShard(st, adjArg)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	lo, hi := a, b
	if b.start.less(a.start) {
		lo, hi = b, a
	}
	if a == b || lo.end.inc() != hi.start {
		return nil, opError(op.String(), invalidArg("Shards %s and %s in stream %s under account %s are not an adjacent pair of shards eligible for merging", a.id, b.id, name, s.cfg.account))
	}
	s.reshard([]*shard{a, b}, st, [][2]hashKey{{lo.start, hi.end}})
	return &kinesis.MergeShardsOutput{}, nil
}

// openShard finds an open shard for a resharding operation; st.mu is held.
// A closed shard is an argument that cannot be used: InvalidArgumentException
// with the service's message (ResourceInUseException is for a stream that
// is not ACTIVE).
func (s *Server) openShard(st *stream, id string) (*shard, error) {
	sh := st.shardByID(id)
	if sh == nil {
		return nil, notFound("Could not find shard %s in stream %s under account %s.", id, st.name, st.account)
	}
	sh.mu.Lock()
	closed := sh.closed
	sh.mu.Unlock()
	if closed {
		return nil, invalidArg("Shard %s in stream %s under account %s has already been merged or split, and thus is not eligible for merging or splitting.", id, st.name, st.account)
	}
	return sh, nil
}

// reshard closes parents and opens children with the given ranges; st.mu is
// held. The children enter the routing table before the parents close, so a
// publisher that finds a parent closed finds its child on reloading the table
// (and one that locked the parent first still appends there, before its end).
func (s *Server) reshard(parents []*shard, st *stream, ranges [][2]hashKey) {
	now := s.now()
	all := *st.all.Load()
	next := append(make([]*shard, 0, len(all)+len(ranges)), all...)
	children := make([]*shard, len(ranges))
	for i, r := range ranges {
		idx := len(next)
		c := newShard(idx, r[0], r[1], formatSeq(st.counter.Add(1), idx), now)
		c.parent = parents[0].id
		if len(parents) > 1 {
			c.adjacent = parents[1].id
		}
		children[i] = c
		next = append(next, c)
	}
	var open []*shard
	for _, sh := range *st.open.Load() {
		if sh != parents[0] && (len(parents) == 1 || sh != parents[1]) {
			open = append(open, sh)
		}
	}
	open = sortedByRange(append(open, children...))
	st.all.Store(&next)
	st.open.Store(&open)
	for _, p := range parents {
		p.mu.Lock()
		// Taken under the parent's lock, the ending number is above every
		// record the parent holds.
		p.closed, p.closedAt, p.children = true, now, children
		p.endSeq = formatSeq(st.counter.Add(1), p.index)
		p.wakeLocked()
		p.mu.Unlock()
	}
}

// UpdateShardCount reshards the stream to TargetShardCount shards of even
// hash-key ranges (UNIFORM_SCALING), as the HTTP endpoint's operation does
// (updateShardCount): for the simulator, which calls the server directly.
func (s *Server) UpdateShardCount(ctx context.Context, in *kinesis.UpdateShardCountInput, opts ...func(*kinesis.Options)) (*kinesis.UpdateShardCountOutput, error) {
	return updateShardCount(s, ctx, in, opts...)
}
