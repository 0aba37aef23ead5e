package shard

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

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
func userRecords(r *types.Record, in *HashRange, emit func(seq string, sub int64, key string, data []byte) error) error {
	seq := aws.ToString(r.SequenceNumber)
	subs, ok, err := kpl.Deaggregate(r.Data)
	if !ok || err != nil {
		return emit(seq, 0, aws.ToString(r.PartitionKey), r.Data)
	}
	for _, s := range subs {
		if in != nil && !inRange(*in, s) {
			continue
		}
		if err := emit(seq, s.SubSequence, s.PartitionKey, s.Data); err != nil {
			return err
		}
	}
	return nil
}

// inRange reports whether sub-record s hashes into r.
func inRange(r HashRange, s kpl.Record) bool {
	if s.ExplicitHashKey == "" {
		return r.Contains(HashKeyOf(s.PartitionKey))
	}
	k, err := ParseHashKey(s.ExplicitHashKey)
	return err != nil || r.Contains(k)
}
