package shard

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

const maxKey = "340282366920938463463374607431768211455"

func shardOf(id, parent, adjacent, start, end string, closed bool) types.Shard {
	s := types.Shard{
		ShardId:             aws.String(id),
		HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String(start), EndingHashKey: aws.String(end)},
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String("1")},
	}
	if parent != "" {
		s.ParentShardId = aws.String(parent)
	}
	if adjacent != "" {
		s.AdjacentParentShardId = aws.String(adjacent)
	}
	if closed {
		s.SequenceNumberRange.EndingSequenceNumber = aws.String("9")
	}
	return s
}

func TestLineageSplitAndMerge(t *testing.T) {
	half := "170141183460469231731687303715884105727"
	halfPlus := "170141183460469231731687303715884105728"
	lin, err := NewLineage([]types.Shard{
		shardOf("s0", "", "", "0", maxKey, true),
		shardOf("s1", "s0", "", "0", half, true),
		shardOf("s2", "s0", "", halfPlus, maxKey, true),
		shardOf("s3", "s1", "s2", "0", maxKey, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"s1", "s2"}, lin.Children("s0")); diff != "" {
		t.Errorf("children of the split parent (-want +got):\n%s", diff)
	}
	merged, _ := lin.Shard("s3")
	if diff := cmp.Diff([]string{"s1", "s2"}, merged.Parents); diff != "" {
		t.Errorf("parents of the merged child (-want +got):\n%s", diff)
	}
	if !lin.HasListedParent("s3") || lin.HasListedParent("s0") {
		t.Error("HasListedParent: s3 has listed parents, s0 has none")
	}
	if s, _ := lin.Shard("s1"); !s.Closed {
		t.Error("a shard with an ending sequence number is closed")
	}
	if got, ok := lin.OpenShardFor("any key"); !ok || got != "s3" {
		t.Errorf("OpenShardFor = %q, %v; want the only open shard s3", got, ok)
	}
	lo, _ := lin.Shard("s1")
	hi, _ := lin.Shard("s2")
	for _, key := range []string{"a", "b", "customer-7", "order-42"} {
		k := HashKeyOf(key)
		if lo.Range.Contains(k) == hi.Range.Contains(k) {
			t.Errorf("key %q: exactly one half of the split must hold hash %s", key, k)
		}
	}
}

func TestLineageRejectsBadRanges(t *testing.T) {
	for name, s := range map[string]types.Shard{
		"not a number": shardOf("s0", "", "", "zero", maxKey, false),
		"too large":    shardOf("s0", "", "", "0", "340282366920938463463374607431768211456", false),
		"empty range":  shardOf("s0", "", "", "10", "9", false),
		"negative":     shardOf("s0", "", "", "-1", "9", false),
	} {
		if _, err := NewLineage([]types.Shard{s}); err == nil {
			t.Errorf("%s: NewLineage accepted it", name)
		}
	}
}

func TestHashKeyRoundTrip(t *testing.T) {
	for _, s := range []string{"0", "1", "18446744073709551616", maxKey} {
		k, err := ParseHashKey(s)
		if err != nil {
			t.Fatal(err)
		}
		if k.String() != s {
			t.Errorf("ParseHashKey(%s).String() = %s", s, k)
		}
	}
}

func TestLineageAddChildren(t *testing.T) {
	lin, _ := NewLineage([]types.Shard{shardOf("s0", "", "", "0", maxKey, true)})
	err := lin.AddChildren([]types.ChildShard{{
		ShardId:      aws.String("s1"),
		ParentShards: []string{"s0"},
		HashKeyRange: &types.HashKeyRange{StartingHashKey: aws.String("0"), EndingHashKey: aws.String(maxKey)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"s1"}, lin.Children("s0")); diff != "" {
		t.Errorf("children (-want +got):\n%s", diff)
	}
}

// pager serves ListShards in pages of one and refuses StreamName with a
// NextToken, as the service does.
type pager struct {
	kinesisapi.API
	shards  []types.Shard
	expired bool // expire the first token once
}

func (p *pager) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	i := 0
	if in.NextToken != nil {
		if in.StreamName != nil {
			return nil, &types.InvalidArgumentException{Message: aws.String("NextToken and StreamName together")}
		}
		if p.expired {
			p.expired = false
			return nil, &types.ExpiredNextTokenException{Message: aws.String("expired")}
		}
		i = int((*in.NextToken)[0] - '0')
	}
	out := &kinesis.ListShardsOutput{Shards: p.shards[i : i+1]}
	if i+1 < len(p.shards) {
		out.NextToken = aws.String(string(rune('0' + i + 1)))
	}
	return out, nil
}

func TestListShardsFollowsPages(t *testing.T) {
	p := &pager{expired: true, shards: []types.Shard{
		shardOf("a", "", "", "0", "9", false), shardOf("b", "", "", "10", "19", false), shardOf("c", "", "", "20", maxKey, false),
	}}
	got, err := listShards(context.Background(), p, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || aws.ToString(got[2].ShardId) != "c" {
		t.Fatalf("listed %d shards, want a, b, c", len(got))
	}
	p.expired = true
	p2 := &pager{shards: p.shards}
	p2.expired = true
	// A second expiry in the same listing is an error, not a loop.
	p3 := &twiceExpired{pager: p2}
	if _, err := listShards(context.Background(), p3, "s"); !errors.As(err, new(*types.ExpiredNextTokenException)) {
		t.Fatalf("err = %v, want the expired token error", err)
	}
}

type twiceExpired struct{ *pager }

func (p *twiceExpired) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if in.NextToken != nil {
		return nil, &types.ExpiredNextTokenException{Message: aws.String("expired")}
	}
	return p.pager.ListShards(ctx, in, o...)
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want errClass
	}{
		{&types.ExpiredIteratorException{}, classExpired},
		{&types.ProvisionedThroughputExceededException{}, classThrottle},
		{&types.LimitExceededException{}, classThrottle},
		{&types.ResourceNotFoundException{}, classGone},
		{&types.InvalidArgumentException{}, classFatal},
		{errors.New("connection reset"), classRetry},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%T) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestBackoffJitterWithinCap(t *testing.T) {
	b := backoff{base: 10, max: 1000}
	for i := 0; i < 50; i++ {
		d := b.next()
		limit := min(int64(1000), int64(10)<<min(i, 20))
		if d < 0 || int64(d) > limit {
			t.Fatalf("wait %d = %d outside [0, %d]", i, d, limit)
		}
	}
	b.reset()
	if d := b.next(); d > 10 {
		t.Fatalf("after reset the wait %d exceeds the base", d)
	}
}

// TestBackoffJitterFollowsASeed: seeded (the deterministic simulation), a
// backoff's waits are a function of the seed, its site, its shard and
// how many it drew, whichever goroutine draws first.
func TestBackoffJitterFollowsASeed(t *testing.T) {
	waits := func(shard string) []time.Duration {
		b := backoff{base: 100 * time.Millisecond, max: 10 * time.Second, site: "read", shard: shard}
		var out []time.Duration
		for range 8 {
			out = append(out, b.next())
		}
		b.reset()
		return append(out, b.next())
	}
	restore := randsrc.Seed(29)
	var other []time.Duration
	done := make(chan struct{})
	go func() { defer close(done); other = waits("shardId-000000000002") }()
	first := waits("shardId-000000000001")
	<-done
	restore()
	defer randsrc.Seed(29)()
	if again := waits("shardId-000000000001"); !slices.Equal(first, again) {
		t.Errorf("seed 29's waits were %v, then %v", first, again)
	}
	if slices.Equal(first, other) {
		t.Errorf("two shards drew the same waits %v", first)
	}
	if first[8] == first[0] {
		t.Errorf("the wait after a reset repeats the first: %v", first)
	}
}
