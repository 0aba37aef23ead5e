package shard

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// BenchmarkUserRecordsAggregated measures the read path's own work per
// sub-record of KPL aggregates (as the publisher writes them: 50 KiB of
// 195-byte messages over 10,000 keys) on a shard that holds half the hash
// range, so each sub-record's key is hashed to filter it: the aggregate's
// MD5 check, its protobuf, the keys' MD5s. ns/sub-record.
func BenchmarkUserRecordsAggregated(b *testing.B) {
	data := []byte(`{"id":12345,"kind":"order.created","account":"acct-0042","body":"` + strings.Repeat("x", 130) + `"}`)
	var recs []types.Record
	subs, key := 0, 0
	for range 8 {
		var bd kpl.Builder
		for bd.Size()+len(data)+32 < 50<<10 {
			bd.Add("customer-"+strconv.Itoa(key%10000), data)
			key += 7919
			subs++
		}
		recs = append(recs, types.Record{SequenceNumber: aws.String(strconv.Itoa(len(recs))), PartitionKey: aws.String("customer-0"), Data: bd.Bytes()})
	}
	half := &HashRange{End: HashKey{Hi: math.MaxUint64 >> 1, Lo: math.MaxUint64}}
	kept := 0
	emit := func(string, int64, string, []byte) error { kept++; return nil }
	datas := make([][]byte, len(recs))
	for i := range recs {
		datas[i] = recs[i].Data
	}
	verified := make([]bool, len(recs))
	for b.Loop() {
		kpl.VerifyAll(verified, datas) // as feed.deliver does
		for i := range recs {
			if err := userRecords(&recs[i], half, verified[i], emit); err != nil {
				b.Fatal(err)
			}
		}
	}
	if kept == 0 || kept == b.N*subs {
		b.Fatalf("kept %d of %d sub-records: the range filtered none or all", kept, b.N*subs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*subs), "ns/sub-record")
}
