package shard

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/md5x"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// userRecords hands each user record that r carries to emit, in order: the
// sub-records of a KPL aggregate, each with its partition key and its index
// as SubSequence, or r itself with SubSequence 0. A corrupt aggregate is
// handed over whole, as one record, so the subscriber can reject it (dead
// letter) instead of it vanishing.
//
// With the shard's hash-key range (in, nil when unknown), a sub-record whose
// explicit hash key, or else the MD5 of its partition key, lies outside it
// is dropped, as the KCL does: the KPL aggregated it before a reshard moved
// its key to another shard, and sends it again there, where it is read.
// One whose explicit hash key does not parse is delivered.
//
// verified says that r is an aggregate whose MD5 trailer kpl.VerifyAll
// found to match (feed.deliver checks a read's aggregates at once).
func userRecords(r *types.Record, in *HashRange, verified bool, emit func(seq string, sub int64, key string, data []byte) error) error {
	seq := aws.ToString(r.SequenceNumber)
	deaggregate := kpl.Deaggregate
	if verified {
		deaggregate = kpl.DeaggregateVerified
	}
	subs, ok, err := deaggregate(r.Data)
	if !ok || err != nil {
		return emit(seq, 0, aws.ToString(r.PartitionKey), r.Data)
	}
	// The partition keys' hashes, sixteen at a time: the digests run side
	// by side (HashKeysOf).
	var (
		keys   [md5x.Lanes]string
		hashes [md5x.Lanes]HashKey
	)
	for len(subs) > 0 {
		chunk := subs[:min(len(subs), len(keys))]
		subs = subs[len(chunk):]
		if in != nil {
			for i, s := range chunk {
				keys[i] = s.PartitionKey
			}
			HashKeysOf(hashes[:len(chunk)], keys[:len(chunk)])
		}
		for i, s := range chunk {
			if in != nil && !inRange(*in, s, hashes[i]) {
				continue
			}
			if err := emit(seq, s.SubSequence, s.PartitionKey, s.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

// inRange reports whether sub-record s, whose partition key hashes to
// hashed, lies in r.
func inRange(r HashRange, s kpl.Record, hashed HashKey) bool {
	if s.ExplicitHashKey == "" {
		return r.Contains(hashed)
	}
	k, err := ParseHashKey(s.ExplicitHashKey)
	return err != nil || r.Contains(k)
}
