package shard

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/md5x"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// HashKey is a 128-bit hash key: the MD5 of a partition key read as a
// big-endian unsigned integer. Two halves compare without allocating.
type HashKey struct{ Hi, Lo uint64 }

// HashKeyOf returns the hash key Kinesis routes partitionKey by.
func HashKeyOf(partitionKey string) HashKey {
	sum := md5.Sum([]byte(partitionKey))
	return hashKey(&sum)
}

// HashKeysOf sets dst[i] to HashKeyOf(keys[i]); dst must be at least as
// long as keys. Many keys at once cost a fraction of one at a time (the
// digests run side by side: see runtime/internal/md5x).
func HashKeysOf(dst []HashKey, keys []string) {
	var sums [md5x.Lanes][md5x.Size]byte
	for len(keys) > 0 {
		n := min(len(keys), len(sums))
		md5x.SumStrings(sums[:n], keys[:n])
		for i := range n {
			dst[i] = hashKey(&sums[i])
		}
		dst, keys = dst[n:], keys[n:]
	}
}

func hashKey(sum *[md5x.Size]byte) HashKey {
	return HashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

// Less reports whether h sorts before o.
func (h HashKey) Less(o HashKey) bool { return h.Hi < o.Hi || (h.Hi == o.Hi && h.Lo < o.Lo) }

func (h HashKey) String() string {
	b := new(big.Int).SetUint64(h.Hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(h.Lo)).String()
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

// ParseHashKey reads a decimal hash key in [0, 2^128), as ListShards writes them.
func ParseHashKey(s string) (HashKey, error) {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok || b.Sign() < 0 || b.Cmp(two128) >= 0 {
		return HashKey{}, fmt.Errorf("%q is not a hash key (a decimal integer in [0, 2^128))", s)
	}
	lo := new(big.Int).And(b, new(big.Int).SetUint64(^uint64(0))).Uint64()
	return HashKey{Hi: new(big.Int).Rsh(b, 64).Uint64(), Lo: lo}, nil
}

// HashRange is a shard's inclusive hash-key range.
type HashRange struct{ Start, End HashKey }

// Contains reports whether k falls in r.
func (r HashRange) Contains(k HashKey) bool { return !k.Less(r.Start) && !r.End.Less(k) }

// Info is one shard as ListShards (or GetRecords' ChildShards) describes it.
type Info struct {
	ID string
	// Parents are ParentShardId and AdjacentParentShardId, when set: one
	// parent after a split, two after a merge.
	Parents []string
	// StartingHashKey and EndingHashKey are the decimal strings the service
	// sent; Range is their parsed form.
	StartingHashKey, EndingHashKey string
	Range                          HashRange
	// Closed is true once the shard has an ending sequence number (it was
	// split or merged); it takes no more records.
	Closed bool
}

// Lineage is the shard graph of one stream at one listing.
type Lineage struct {
	shards map[string]Info
	ids    []string // sorted
}

// NewLineage builds the lineage from the shards of a listing. A shard whose
// hash-key range does not parse is an error: routing could not be trusted.
func NewLineage(shards []types.Shard) (*Lineage, error) {
	l := &Lineage{shards: make(map[string]Info, len(shards))}
	for _, s := range shards {
		info, err := infoOf(s)
		if err != nil {
			return nil, err
		}
		l.add(info)
	}
	return l, nil
}

func infoOf(s types.Shard) (Info, error) {
	id := aws.ToString(s.ShardId)
	if id == "" {
		return Info{}, errors.New("ListShards returned a shard without an id")
	}
	info := Info{ID: id}
	for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
		if v := aws.ToString(p); v != "" {
			info.Parents = append(info.Parents, v)
		}
	}
	if s.HashKeyRange != nil {
		if err := info.setRange(aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey)); err != nil {
			return Info{}, err
		}
	}
	info.Closed = s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil
	return info, nil
}

func (i *Info) setRange(start, end string) error {
	var err error
	if i.Range.Start, err = ParseHashKey(start); err != nil {
		return fmt.Errorf("shard %s: starting hash key: %w", i.ID, err)
	}
	if i.Range.End, err = ParseHashKey(end); err != nil {
		return fmt.Errorf("shard %s: ending hash key: %w", i.ID, err)
	}
	if i.Range.End.Less(i.Range.Start) {
		return fmt.Errorf("shard %s: hash key range %s..%s is empty", i.ID, start, end)
	}
	i.StartingHashKey, i.EndingHashKey = start, end
	return nil
}

func (l *Lineage) add(info Info) {
	if _, ok := l.shards[info.ID]; !ok {
		i, _ := slices.BinarySearch(l.ids, info.ID)
		l.ids = slices.Insert(l.ids, i, info.ID)
	}
	l.shards[info.ID] = info
}

// AddChildren records children that GetRecords reported at the end of
// parent (servers that send ChildShards), so they are known before the next
// listing.
func (l *Lineage) AddChildren(children []types.ChildShard) error {
	for _, c := range children {
		info := Info{ID: aws.ToString(c.ShardId), Parents: slices.Clone(c.ParentShards)}
		if info.ID == "" {
			return errors.New("GetRecords returned a child shard without an id")
		}
		if c.HashKeyRange != nil {
			if err := info.setRange(aws.ToString(c.HashKeyRange.StartingHashKey), aws.ToString(c.HashKeyRange.EndingHashKey)); err != nil {
				return err
			}
		}
		if old, ok := l.shards[info.ID]; ok {
			info.Closed = old.Closed // a listing knows more than a child notice
		}
		l.add(info)
	}
	return nil
}

// IDs returns every shard id, sorted.
func (l *Lineage) IDs() []string { return slices.Clone(l.ids) }

// Shard returns one shard.
func (l *Lineage) Shard(id string) (Info, bool) {
	i, ok := l.shards[id]
	return i, ok
}

// Children returns the shards that name id as a parent, sorted.
func (l *Lineage) Children(id string) []string {
	var out []string
	for _, c := range l.ids {
		if slices.Contains(l.shards[c].Parents, id) {
			out = append(out, c)
		}
	}
	return out
}

// HasListedParent reports whether a parent of id is itself in the lineage:
// such a shard was born of a split or merge the stream still remembers.
func (l *Lineage) HasListedParent(id string) bool {
	for _, p := range l.shards[id].Parents {
		if _, ok := l.shards[p]; ok {
			return true
		}
	}
	return false
}

// OpenShardFor returns the open shard whose range holds partitionKey's hash.
func (l *Lineage) OpenShardFor(partitionKey string) (string, bool) {
	k := HashKeyOf(partitionKey)
	for _, id := range l.ids {
		if s := l.shards[id]; !s.Closed && s.Range.Contains(k) {
			return id, true
		}
	}
	return "", false
}

// listShards returns every shard of stream, following NextToken. A token
// that expired mid-listing restarts the listing once.
func listShards(ctx context.Context, client kinesisapi.API, stream string) ([]types.Shard, error) {
	shards, _, err := listShardsAt(ctx, client, stream)
	return shards, err
}

// listShardsAt is listShards that also returns a time (see serviceTime) at
// or before the listing: a record written after the listing arrived at or
// after it.
func listShardsAt(ctx context.Context, client kinesisapi.API, stream string) ([]types.Shard, time.Time, error) {
	for attempt := 0; ; attempt++ {
		var out []types.Shard
		var at time.Time
		in := &kinesis.ListShardsInput{}
		in.StreamName, in.StreamARN = streamRef(stream)
		for {
			sent := time.Now()
			page, err := client.ListShards(ctx, in)
			if err != nil {
				var expired *types.ExpiredNextTokenException
				if errors.As(err, &expired) && attempt == 0 {
					break
				}
				return nil, time.Time{}, err
			}
			if at.IsZero() {
				at = serviceTime(page.ResultMetadata, sent)
			}
			out = append(out, page.Shards...)
			if aws.ToString(page.NextToken) == "" {
				return out, at, nil
			}
			// With a NextToken the service refuses StreamName.
			in = &kinesis.ListShardsInput{NextToken: page.NextToken}
		}
	}
}

// List lists stream's shards (following NextToken) into a lineage; a
// publisher that routes by hash-key range builds its shard map from it.
func List(ctx context.Context, client kinesisapi.API, stream string) (*Lineage, error) {
	shards, err := listShards(ctx, client, stream)
	if err != nil {
		return nil, err
	}
	return NewLineage(shards)
}
