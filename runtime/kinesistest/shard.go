package kinesistest

import (
	"context"
	"encoding/base64"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// record is one stored record; its fields never change once added. It is
// small and holds a single pointer, which keeps a long shard cheap for the
// collector: the key and the data share one private buffer, and the
// sequence number is formatted from counter and the shard's index when
// answering.
type record struct {
	counter uint64
	arrival int64  // UnixNano
	kd      []byte // the partition key, then the data
	keyLen  int
}

// key shares the record's buffer, which is never written again.
func (r *record) key() string { return unsafe.String(&r.kd[0], r.keyLen) }

func (r *record) data() []byte { return r.kd[r.keyLen:] }

type shard struct {
	index      int
	id         string
	start, end hashKey
	startSeq   string
	parent     string // ParentShardId
	adjacent   string // AdjacentParentShardId
	createdAt  time.Time

	// mu guards everything below.
	mu       sync.Mutex
	log      recordLog
	closed   bool
	endSeq   string
	closedAt time.Time
	children []*shard
	notify   chan struct{} // made by a waiter, closed by the next append or close
	rates    rates         // WithThrottling

	getCalls  atomic.Int64
	emptyGets atomic.Int64
	putCount  atomic.Int64
}

func newShard(index int, start, end hashKey, startSeq string, created time.Time) *shard {
	return &shard{index: index, id: shardID(index), start: start, end: end, startSeq: startSeq, createdAt: created}
}

// wakeLocked wakes everyone waiting for this shard to change.
func (sh *shard) wakeLocked() {
	if sh.notify != nil {
		close(sh.notify)
		sh.notify = nil
	}
}

// waitChanLocked returns a channel closed at the shard's next change.
func (sh *shard) waitChanLocked() <-chan struct{} {
	if sh.notify == nil {
		sh.notify = make(chan struct{})
	}
	return sh.notify
}

func (sh *shard) toType() types.Shard {
	sh.mu.Lock()
	endSeq := sh.endSeq
	sh.mu.Unlock()
	out := types.Shard{
		ShardId:             aws.String(sh.id),
		HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String(sh.start.String()), EndingHashKey: aws.String(sh.end.String())},
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String(sh.startSeq)},
	}
	if endSeq != "" {
		out.SequenceNumberRange.EndingSequenceNumber = aws.String(endSeq)
	}
	if sh.parent != "" {
		out.ParentShardId = aws.String(sh.parent)
	}
	if sh.adjacent != "" {
		out.AdjacentParentShardId = aws.String(sh.adjacent)
	}
	return out
}

// state snapshots what the shard filters need.
func (sh *shard) state() (closed bool, closedAt time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.closed, sh.closedAt
}

// openAt reports whether the shard was open at t. Shards made by
// CreateStream count as open since the beginning of time.
func (sh *shard) openAt(t time.Time) bool {
	closed, closedAt := sh.state()
	return !sh.createdAt.After(t) && (!closed || closedAt.After(t))
}

const listTokenTTL = 5 * time.Minute

// ListShards lists a stream's shards in index order (closed ones included
// until their records have passed retention), honouring MaxResults (default
// 1000, up to 10000), NextToken, ExclusiveStartShardId and ShardFilter.
func (s *Server) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	const op = OpListShards
	var (
		name    string
		after   = -1
		filter  = in.ShardFilter
		nameErr error
	)
	if in.NextToken != nil {
		if in.StreamName != nil || in.StreamARN != nil || in.ExclusiveStartShardId != nil || in.ShardFilter != nil {
			return nil, opError(op.String(), invalidArg("NextToken cannot be provided together with StreamName, StreamARN, ExclusiveStartShardId or ShardFilter."))
		}
	} else {
		name, nameErr = s.resolve(ctx, in.StreamName, in.StreamARN)
	}
	if err := s.begin(ctx, op, name, ""); err != nil {
		return nil, err
	}
	if nameErr != nil {
		return nil, opError(op.String(), nameErr)
	}
	now := s.now()
	if in.NextToken != nil {
		tok, err := decodeListToken(*in.NextToken)
		if err != nil {
			return nil, opError(op.String(), invalidArg("Invalid NextToken: %v", err))
		}
		if now.Sub(tok.issued) > listTokenTTL {
			return nil, opError(op.String(), expiredToken("The timestamp in the NextToken has expired."))
		}
		name, after, filter = tok.stream, tok.after, tok.filter
	}
	max := 1000
	if in.MaxResults != nil {
		max = int(*in.MaxResults)
		if max < 1 || max > 10000 {
			return nil, opError(op.String(), validation("1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 10000", max))
		}
	}
	if in.ExclusiveStartShardId != nil {
		idx, ok := parseShardID(*in.ExclusiveStartShardId)
		if !ok {
			return nil, opError(op.String(), validation("ExclusiveStartShardId %q is not a shard id", *in.ExclusiveStartShardId))
		}
		after = idx
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	keep, err := s.shardFilter(st, filter, now)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	out := &kinesis.ListShardsOutput{Shards: []types.Shard{}}
	for _, sh := range *st.all.Load() {
		if sh.index <= after || !keep(sh) {
			continue
		}
		if len(out.Shards) == max {
			tok := listToken{stream: name, after: sh.index - 1, filter: filter, issued: now}
			out.NextToken = aws.String(tok.encode())
			break
		}
		out.Shards = append(out.Shards, sh.toType())
	}
	return out, nil
}

// shardFilter returns the predicate a ListShards ShardFilter selects.
func (s *Server) shardFilter(st *stream, f *types.ShardFilter, now time.Time) (func(*shard) bool, error) {
	horizon := now.Add(-s.cfg.retention)
	retained := func(sh *shard) bool {
		closed, closedAt := sh.state()
		return !closed || !closedAt.Before(horizon)
	}
	if f == nil {
		return retained, nil
	}
	switch f.Type {
	case types.ShardFilterTypeFromTrimHorizon:
		return retained, nil
	case types.ShardFilterTypeAtTrimHorizon:
		return func(sh *shard) bool { return retained(sh) && sh.openAt(horizon) }, nil
	case types.ShardFilterTypeAtLatest:
		return func(sh *shard) bool { closed, _ := sh.state(); return !closed }, nil
	case types.ShardFilterTypeAfterShardId:
		if f.ShardId == nil {
			return nil, invalidArg("ShardFilter AFTER_SHARD_ID needs a ShardId.")
		}
		idx, ok := parseShardID(*f.ShardId)
		if !ok {
			return nil, invalidArg("ShardFilter ShardId %q is not a shard id.", *f.ShardId)
		}
		return func(sh *shard) bool { return sh.index > idx && retained(sh) }, nil
	case types.ShardFilterTypeAtTimestamp, types.ShardFilterTypeFromTimestamp:
		if f.Timestamp == nil {
			return nil, invalidArg("ShardFilter %s needs a Timestamp.", f.Type)
		}
		ts := *f.Timestamp
		if f.Type == types.ShardFilterTypeAtTimestamp {
			return func(sh *shard) bool { return retained(sh) && sh.openAt(ts) }, nil
		}
		// The shards open at ts and every shard made after it.
		return func(sh *shard) bool {
			closed, closedAt := sh.state()
			return retained(sh) && (!closed || closedAt.After(ts))
		}, nil
	}
	return nil, validation("ShardFilter type %q is not one of %v", f.Type, types.ShardFilterType("").Values())
}

type listToken struct {
	stream string
	after  int
	filter *types.ShardFilter
	issued time.Time
}

func (t listToken) encode() string {
	var ftype, fshard, fts string
	if t.filter != nil {
		ftype = string(t.filter.Type)
		fshard = aws.ToString(t.filter.ShardId)
		if t.filter.Timestamp != nil {
			fts = strconv.FormatInt(t.filter.Timestamp.UnixNano(), 10)
		}
	}
	raw := strings.Join([]string{"L1", t.stream, strconv.Itoa(t.after), strconv.FormatInt(t.issued.UnixNano(), 10), ftype, fshard, fts}, "\x00")
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeListToken(s string) (listToken, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listToken{}, err
	}
	f := strings.Split(string(raw), "\x00")
	if len(f) != 7 || f[0] != "L1" {
		return listToken{}, errMalformed
	}
	after, err1 := strconv.Atoi(f[2])
	issued, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return listToken{}, errMalformed
	}
	t := listToken{stream: f[1], after: after, issued: time.Unix(0, issued).UTC()}
	if f[4] != "" {
		t.filter = &types.ShardFilter{Type: types.ShardFilterType(f[4])}
		if f[5] != "" {
			t.filter.ShardId = aws.String(f[5])
		}
		if f[6] != "" {
			ns, err := strconv.ParseInt(f[6], 10, 64)
			if err != nil {
				return listToken{}, errMalformed
			}
			ts := time.Unix(0, ns).UTC()
			t.filter.Timestamp = &ts
		}
	}
	return t, nil
}

// sortedByRange orders open shards by their hash range for routing.
func sortedByRange(shards []*shard) []*shard {
	out := append([]*shard(nil), shards...)
	sort.Slice(out, func(i, j int) bool { return out[i].start.less(out[j].start) })
	return out
}
