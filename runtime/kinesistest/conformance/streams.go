package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The stream features of SDK v1.57.0: a record size per stream, AUTO
// placement and StreamARN on every data-plane call.
//
// Where the SDK's documentation is silent the suite expects what the
// service most plausibly does; each choice is one constant or one line
// here, to change when the service is seen to differ:
//
//   - A stream created without MaxRecordSizeInKiB reports 1024
//     (defaultRecordKiB): the 1 MiB every stream had before the setting.
//   - A record over the stream's limit but within the request shape's
//     10 MiB is InvalidArgumentException (errOverStreamLimit), a check of
//     the stream rather than of the request's shape; kinesis-mock answers
//     the same. Out of range MaxRecordSizeInKiB is ValidationException, as
//     the SDK documents for UpdateMaxRecordSize.
//   - The limit counts data plus partition key, as the SDK documents for
//     PutRecords.
//   - A PutRecords request over 10 MiB (data plus keys) is
//     InvalidArgumentException, as the 5 MiB limit was.
//   - AUTO spreads records evenly: 40 records of one key on a 4-shard
//     stream land on at least 2 shards (autoMinShards).
//   - A StreamARN of another region is ResourceNotFoundException (the
//     service's endpoints are regional); a malformed one breaks the
//     member's pattern: ValidationException.

const (
	defaultRecordKiB   = 1024
	autoMinShards      = 2
	errOverStreamLimit = "InvalidArgumentException"
)

// uniqueName is a stream or queue name unique to this run.
func (e *env) uniqueName(prefix string) string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("%s-%s-%s", prefix, strings.NewReplacer("/", "-", "_", "-").Replace(e.t.Name()), hex.EncodeToString(rnd[:]))
	if len(name) > 128 {
		name = name[len(name)-128:]
	}
	return name
}

// createStream creates a stream as in describes (its name filled in),
// waits until it is ACTIVE and deletes it when the test ends; it returns
// the name, or the CreateStream error.
func (e *env) createStream(in kinesis.CreateStreamInput) (string, error) {
	e.t.Helper()
	name := e.uniqueName("conf")
	in.StreamName = &name
	if _, err := e.api.CreateStream(e.ctx, &in); err != nil {
		return "", err
	}
	e.waitActive(name)
	e.t.Cleanup(func() { e.deleteStream(name) })
	return name, nil
}

func onDemand() *types.StreamModeDetails {
	return &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}
}

// onDemandStream creates an on-demand stream, or, on a backend with
// NoOnDemand, checks that CreateStream refuses one and returns "".
func (e *env) onDemandStream(in kinesis.CreateStreamInput) string {
	e.t.Helper()
	in.StreamModeDetails = onDemand()
	name, err := e.createStream(in)
	if e.dev.NoOnDemand {
		if err == nil {
			e.t.Fatal("declared NoOnDemand, but CreateStream made an on-demand stream")
		}
		wantErr[*types.ValidationException](e.t, "CreateStream on demand (NoOnDemand)", err)
		return ""
	}
	if err != nil {
		e.t.Fatalf("CreateStream on demand: %v", err)
	}
	return name
}

func (e *env) summary(name string) *types.StreamDescriptionSummary {
	e.t.Helper()
	out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
	if err != nil {
		e.t.Fatalf("DescribeStreamSummary %s: %v", name, err)
	}
	return out.StreamDescriptionSummary
}

// recordOf is a record of exactly n bytes of data plus key (or of data
// alone on a backend with RecordSizeExcludesKey).
func (e *env) recordOf(n int) (string, []byte) {
	key := "big"
	if !e.dev.RecordSizeExcludesKey {
		n -= len(key)
	}
	return key, make([]byte, n)
}

func testMaxRecordSize(t *testing.T, e *env) {
	// A stream created without the setting: 1 MiB.
	name := e.stream(1)
	s := e.summary(name)
	switch {
	case e.dev.NoMaxRecordSize || e.dev.DefaultMaxRecordSizeUnreported:
		if s.MaxRecordSizeInKiB != nil {
			t.Errorf("declared NoMaxRecordSize or DefaultMaxRecordSizeUnreported, but DescribeStreamSummary reports MaxRecordSizeInKiB %d", *s.MaxRecordSizeInKiB)
		}
	case aws.ToInt32(s.MaxRecordSizeInKiB) != defaultRecordKiB:
		t.Errorf("a stream created without MaxRecordSizeInKiB reports %v, want %d", s.MaxRecordSizeInKiB, defaultRecordKiB)
	}
	key, data := e.recordOf(1 << 20)
	e.putOne(name, key, data)
	key, data = e.recordOf(1<<20 + 1)
	_, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: &key, Data: data})
	if e.dev.NoMaxRecordSize {
		// The old shape constraint on data.
		wantErr[*types.ValidationException](t, "PutRecord of 1 MiB + 1 (NoMaxRecordSize)", err)
	} else {
		wantCode(t, "PutRecord of 1 MiB + 1 on a 1 MiB stream", err, errOverStreamLimit)
	}
	_, err = e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: []types.PutRecordsRequestEntry{{PartitionKey: &key, Data: data}}})
	switch {
	case e.dev.PutRecordsUncheckedSizes:
		if err != nil {
			t.Errorf("declared PutRecordsUncheckedSizes, but PutRecords of a record over the limit failed: %v", err)
		}
	case e.dev.NoMaxRecordSize:
		wantErr[*types.ValidationException](t, "PutRecords of 1 MiB + 1 (NoMaxRecordSize)", err)
	default:
		wantCode(t, "PutRecords of a record of 1 MiB + 1 on a 1 MiB stream", err, errOverStreamLimit)
	}

	// A stream of 2 MiB records.
	big, err := e.createStream(kinesis.CreateStreamInput{ShardCount: aws.Int32(1), MaxRecordSizeInKiB: aws.Int32(2048)})
	if err != nil {
		t.Fatalf("CreateStream with MaxRecordSizeInKiB 2048: %v", err)
	}
	arn := e.streamARN(big)
	key, data = e.recordOf(2 << 20)
	data[len(data)-1] = 7
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &big, PartitionKey: &key, Data: data})
	if e.dev.NoMaxRecordSize {
		wantErr[*types.ValidationException](t, "PutRecord of 2 MiB on a stream created for 2 MiB (NoMaxRecordSize)", err)
		_, err = e.api.UpdateMaxRecordSize(e.ctx, &kinesis.UpdateMaxRecordSizeInput{StreamARN: &arn, MaxRecordSizeInKiB: aws.Int32(4096)})
		if err == nil {
			t.Error("declared NoMaxRecordSize, but UpdateMaxRecordSize succeeded")
		}
		return
	}
	if err != nil {
		t.Fatalf("PutRecord of 2 MiB on a 2 MiB stream: %v", err)
	}
	if got := aws.ToInt32(e.summary(big).MaxRecordSizeInKiB); got != 2048 {
		t.Errorf("DescribeStreamSummary reports MaxRecordSizeInKiB %d, want 2048", got)
	}
	shard := aws.ToString(e.shards(big)[0].ShardId)
	recs, _ := e.readN(e.iterator(big, shard, types.ShardIteratorTypeTrimHorizon, "", nil), 1)
	if len(recs[0].Data) != len(data) || recs[0].Data[len(data)-1] != 7 {
		t.Errorf("a 2 MiB record read back as %d bytes", len(recs[0].Data))
	}
	key, data = e.recordOf(2<<20 + 1)
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &big, PartitionKey: &key, Data: data})
	wantCode(t, "PutRecord of 2 MiB + 1 on a 2 MiB stream", err, errOverStreamLimit)
	if !e.dev.PutRecordsUncheckedSizes {
		_, err = e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &big, Records: []types.PutRecordsRequestEntry{{PartitionKey: &key, Data: data}}})
		wantCode(t, "PutRecords of a record of 2 MiB + 1 on a 2 MiB stream", err, errOverStreamLimit)
	}

	// Lowered again, the stream refuses what it took.
	if _, err := e.api.UpdateMaxRecordSize(e.ctx, &kinesis.UpdateMaxRecordSizeInput{StreamARN: &arn, MaxRecordSizeInKiB: aws.Int32(1024)}); err != nil {
		t.Fatalf("UpdateMaxRecordSize 1024: %v", err)
	}
	e.waitActive(big)
	if got := aws.ToInt32(e.summary(big).MaxRecordSizeInKiB); got != 1024 {
		t.Errorf("after UpdateMaxRecordSize 1024 DescribeStreamSummary reports %d", got)
	}
	key, data = e.recordOf(2 << 20)
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &big, PartitionKey: &key, Data: data})
	wantCode(t, "PutRecord of 2 MiB after lowering the limit to 1 MiB", err, errOverStreamLimit)

	for _, v := range []int32{1023, 10241} {
		_, err = e.api.UpdateMaxRecordSize(e.ctx, &kinesis.UpdateMaxRecordSizeInput{StreamARN: &arn, MaxRecordSizeInKiB: aws.Int32(v)})
		if e.dev.MaxRecordSizeRangeIsInvalidArgument {
			wantErr[*types.InvalidArgumentException](t, fmt.Sprintf("UpdateMaxRecordSize %d (MaxRecordSizeRangeIsInvalidArgument)", v), err)
		} else {
			wantErr[*types.ValidationException](t, fmt.Sprintf("UpdateMaxRecordSize %d", v), err)
		}
	}
}

// testPutRecordsRequestSize: a PutRecords request takes up to 10 MiB of
// data plus keys.
//
// A backend with PutRecordsUncheckedSizes checks no sizes in PutRecords
// (MaxRecordSize checks that); 10 MiB through kinesis-mock take most of a
// minute, so the case stops there.
func testPutRecordsRequestSize(t *testing.T, e *env) {
	if e.dev.PutRecordsUncheckedSizes {
		return
	}
	name := e.stream(1)
	const n = 10
	entries := make([]types.PutRecordsRequestEntry, n)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("k%d", i)), Data: make([]byte, 1<<20-2)}
	}
	out, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: entries})
	if e.dev.PutRecordsLimit5MiB {
		if err == nil {
			t.Fatal("declared PutRecordsLimit5MiB, but a PutRecords request of 10 MiB succeeded")
		}
		return
	}
	if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
		t.Fatalf("PutRecords of 10 MiB (data plus keys): %v", err)
	}
	entries[0].Data = append(entries[0].Data, 0)
	_, err = e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: entries})
	wantErr[*types.InvalidArgumentException](t, "PutRecords of 10 MiB + 1", err)
}

func testAutoDistribution(t *testing.T, e *env) {
	_, err := e.createStream(kinesis.CreateStreamInput{ShardCount: aws.Int32(2), RecordDistributionStrategy: types.RecordDistributionStrategyAuto})
	if !e.dev.NoRecordDistributionStrategy {
		wantErr[*types.InvalidArgumentException](t, "CreateStream of a provisioned AUTO stream", err)
	}
	name := e.onDemandStream(kinesis.CreateStreamInput{RecordDistributionStrategy: types.RecordDistributionStrategyAuto})
	if name == "" {
		return
	}
	arn := e.streamARN(name)
	spread := func() map[string]int {
		shards := map[string]int{}
		for i := range 40 {
			out, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: aws.String("one-key"), Data: payload(i), ExplicitHashKey: aws.String("0")})
			if err != nil {
				t.Fatalf("PutRecord: %v", err)
			}
			shards[aws.ToString(out.ShardId)]++
		}
		return shards
	}
	if e.dev.NoRecordDistributionStrategy {
		if got := spread(); len(got) != 1 {
			t.Errorf("declared NoRecordDistributionStrategy, but 40 records of one key landed on shards %v", got)
		}
		_, err := e.api.UpdateStreamRecordDistributionStrategy(e.ctx, &kinesis.UpdateStreamRecordDistributionStrategyInput{StreamARN: &arn, RecordDistributionStrategy: types.RecordDistributionStrategyAuto})
		if err == nil {
			t.Error("declared NoRecordDistributionStrategy, but UpdateStreamRecordDistributionStrategy succeeded")
		}
		return
	}
	if s := e.summary(name).RecordDistributionStrategy; s != types.RecordDistributionStrategyAuto {
		t.Errorf("DescribeStreamSummary of an AUTO stream reports %q", s)
	}
	if got := spread(); len(got) < autoMinShards {
		t.Errorf("AUTO: 40 records of one key (and ExplicitHashKey 0) landed on shards %v, want at least %d", got, autoMinShards)
	}
	// AUTO takes records without a partition key.
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, Data: []byte("keyless")}); err != nil {
		t.Errorf("PutRecord without a key on an AUTO stream: %v", err)
	}
	if _, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: []types.PutRecordsRequestEntry{{Data: []byte("keyless")}}}); err != nil {
		t.Errorf("PutRecords without a key on an AUTO stream: %v", err)
	}

	// Back to keys: one key, one shard.
	if _, err := e.api.UpdateStreamRecordDistributionStrategy(e.ctx, &kinesis.UpdateStreamRecordDistributionStrategyInput{StreamARN: &arn, RecordDistributionStrategy: types.RecordDistributionStrategyUserPartitionKey}); err != nil {
		t.Fatalf("UpdateStreamRecordDistributionStrategy USER_PARTITION_KEY: %v", err)
	}
	if s := e.summary(name).RecordDistributionStrategy; s != types.RecordDistributionStrategyUserPartitionKey {
		t.Errorf("after the switch DescribeStreamSummary reports %q", s)
	}
	if got := spread(); len(got) != 1 {
		t.Errorf("USER_PARTITION_KEY: 40 records of one key landed on shards %v", got)
	}
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, Data: []byte("keyless")})
	wantErr[*types.ValidationException](t, "PutRecord without a key on a USER_PARTITION_KEY stream", err)

	// Provisioned streams have no strategy.
	prov := e.stream(1)
	if s := e.summary(prov).RecordDistributionStrategy; s != "" {
		t.Errorf("DescribeStreamSummary of a provisioned stream reports strategy %q, want none", s)
	}
	_, err = e.api.UpdateStreamRecordDistributionStrategy(e.ctx, &kinesis.UpdateStreamRecordDistributionStrategyInput{StreamARN: aws.String(e.streamARN(prov)), RecordDistributionStrategy: types.RecordDistributionStrategyAuto})
	wantErr[*types.InvalidArgumentException](t, "UpdateStreamRecordDistributionStrategy AUTO of a provisioned stream", err)
}

// testStreamARN names a stream by StreamARN alone on every data-plane
// call, and by ARNs of another region, another account and a bad form.
func testStreamARN(t *testing.T, e *env) {
	name := e.stream(1)
	arn := e.streamARN(name)
	_, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamARN: &arn, PartitionKey: aws.String("k"), Data: []byte("by-arn")})
	if e.dev.NoStreamARN {
		if err == nil {
			t.Fatal("declared NoStreamARN, but PutRecord by StreamARN succeeded")
		}
		return
	}
	if err != nil {
		t.Fatalf("PutRecord by StreamARN: %v", err)
	}
	if _, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamARN: &arn, Records: []types.PutRecordsRequestEntry{{PartitionKey: aws.String("k"), Data: []byte("by-arn-2")}}}); err != nil {
		t.Fatalf("PutRecords by StreamARN: %v", err)
	}
	if _, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamARN: &arn}); err != nil {
		t.Fatalf("DescribeStreamSummary by StreamARN: %v", err)
	}
	ls, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamARN: &arn})
	if err != nil || len(ls.Shards) != 1 {
		t.Fatalf("ListShards by StreamARN: %v", err)
	}
	it, err := e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamARN: &arn, ShardId: ls.Shards[0].ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatalf("GetShardIterator by StreamARN: %v", err)
	}
	var got []string
	next := it.ShardIterator
	for len(got) < 2 {
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: next, StreamARN: &arn})
		if err != nil {
			t.Fatalf("GetRecords with StreamARN: %v", err)
		}
		for _, r := range out.Records {
			got = append(got, string(r.Data))
		}
		next = out.NextShardIterator
	}
	if fmt.Sprint(got) != "[by-arn by-arn-2]" {
		t.Errorf("read by ARN %v", got)
	}

	// arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME
	f := strings.SplitN(arn, ":", 6)
	if len(f) != 6 {
		t.Fatalf("stream ARN %q has not six fields", arn)
	}
	region := "eu-west-3"
	if f[3] == region {
		region = "ap-south-1"
	}
	otherRegion := strings.Join([]string{f[0], f[1], f[2], region, f[4], f[5]}, ":")
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamARN: &otherRegion, PartitionKey: aws.String("k"), Data: []byte("x")})
	wantErr[*types.ResourceNotFoundException](t, "PutRecord by an ARN of another region", err)
	account := "111122223333"
	if f[4] == account {
		account = "444455556666"
	}
	otherAccount := strings.Join([]string{f[0], f[1], f[2], f[3], account, f[5]}, ":")
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamARN: &otherAccount, PartitionKey: aws.String("k"), Data: []byte("x")})
	wantErr[*types.ResourceNotFoundException](t, "PutRecord by the ARN of a stream no other account has", err)
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamARN: aws.String("arn:aws:kinesis:" + f[3] + ":12:stream/" + name), PartitionKey: aws.String("k"), Data: []byte("x")})
	if e.dev.MalformedARNIsNotFound {
		wantErr[*types.ResourceNotFoundException](t, "PutRecord by a malformed ARN (MalformedARNIsNotFound)", err)
	} else {
		wantErr[*types.ValidationException](t, "PutRecord by a malformed ARN", err)
	}

	if e.other == nil {
		return
	}
	// Another account's stream of the same name: by ARN it is theirs, by
	// name ours.
	if _, err := e.other.CreateStream(e.ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: aws.Int32(2)}); err != nil {
		t.Fatalf("CreateStream of the same name in another account: %v", err)
	}
	t.Cleanup(func() { _, _ = e.other.DeleteStream(e.ctx, &kinesis.DeleteStreamInput{StreamName: &name}) })
	theirs, err := e.other.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
	if err != nil {
		t.Fatal(err)
	}
	tarn := aws.ToString(theirs.StreamDescriptionSummary.StreamARN)
	if tarn == arn || !strings.HasSuffix(tarn, ":stream/"+name) {
		t.Fatalf("the other account's stream has ARN %s (ours %s)", tarn, arn)
	}
	d, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamARN: &tarn})
	if err != nil || aws.ToInt32(d.StreamDescriptionSummary.OpenShardCount) != 2 {
		t.Fatalf("DescribeStreamSummary of the other account's stream by ARN: %v", err)
	}
	p, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamARN: &tarn, PartitionKey: aws.String("k"), Data: []byte("cross")})
	if err != nil {
		t.Fatalf("PutRecord to the other account's stream by ARN: %v", err)
	}
	it, err = e.other.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: p.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.other.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil || len(out.Records) != 1 || string(out.Records[0].Data) != "cross" {
		t.Fatalf("the other account reads its stream: %v, %d records", err, len(out.Records))
	}
	if ours := e.summary(name); aws.ToInt32(ours.OpenShardCount) != 1 {
		t.Errorf("by name our own stream has %d shards, want 1", aws.ToInt32(ours.OpenShardCount))
	}
}

// deleteStream deletes a stream, its queues first, when a test ends.
func (e *env) deleteStream(name string) {
	ctx, cancel := contextFor(5 * time.Second)
	defer cancel()
	_, _ = e.api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &name})
}
