package wire_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The runtime's wire options against the in-process server's HTTP/2 front:
// what SizedPutRecords writes the front stores, and FastGetRecords decodes
// the front's answers exactly as the SDK does, so tests that run the
// runtime through the front run its real wire path.
func TestWireOptionsOnTheHTTPFront(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := kinesistest.New()
	h := kinesistest.NewHTTPServer(s)
	defer h.Close()
	c := h.Client()
	if err := s.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	var entries []types.PutRecordsRequestEntry
	for i := range 20 {
		entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("key\t\"%d\"é", i)), Data: []byte(fmt.Sprintf("data\x00%d\xff", i))})
	}
	out, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: entries}, wire.SizedPutRecords)
	if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
		t.Fatalf("PutRecords: %v, %v failed", err, out)
	}
	it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator}, wire.FastGetRecords)
	if err != nil {
		t.Fatal(err)
	}
	if len(fast.Records) != len(entries) {
		t.Fatalf("read %d records, wrote %d", len(fast.Records), len(entries))
	}
	for i, r := range fast.Records {
		if string(r.Data) != string(entries[i].Data) || *r.PartitionKey != *entries[i].PartitionKey {
			t.Fatalf("record %d = (%q, %q), wrote (%q, %q)", i, r.Data, *r.PartitionKey, entries[i].Data, *entries[i].PartitionKey)
		}
	}
	ignore := cmpopts.IgnoreFields(kinesis.GetRecordsOutput{}, "ResultMetadata", "NextShardIterator") // an iterator names its issue time
	if d := cmp.Diff(sdk, fast, ignore, cmpopts.IgnoreUnexported(kinesis.GetRecordsOutput{}, types.Record{})); d != "" {
		t.Fatalf("FastGetRecords differs from the SDK on the front's answer (-sdk +fast):\n%s", d)
	}
}
