package conformance

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func testStreamLifecycle(t *testing.T, e *env) {
	name := e.stream(3)
	d, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
	if err != nil {
		t.Fatal(err)
	}
	s := d.StreamDescriptionSummary
	if aws.ToString(s.StreamName) != name || s.StreamStatus != types.StreamStatusActive || aws.ToInt32(s.OpenShardCount) != 3 || aws.ToString(s.StreamARN) == "" {
		t.Fatalf("DescribeStreamSummary = name %q status %s open shards %d ARN %q; want %q ACTIVE 3 and an ARN",
			aws.ToString(s.StreamName), s.StreamStatus, aws.ToInt32(s.OpenShardCount), aws.ToString(s.StreamARN), name)
	}

	_, err = e.api.CreateStream(e.ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: aws.Int32(1)})
	wantErr[*types.ResourceInUseException](t, "CreateStream of an existing stream", err)

	missing := name + "-missing"
	_, err = e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &missing})
	wantErr[*types.ResourceNotFoundException](t, "DescribeStreamSummary of a missing stream", err)
	_, err = e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: &missing})
	wantErr[*types.ResourceNotFoundException](t, "ListShards of a missing stream", err)
	_, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &missing, PartitionKey: aws.String("k"), Data: []byte("x")})
	wantErr[*types.ResourceNotFoundException](t, "PutRecord to a missing stream", err)
	_, err = e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &missing, Records: []types.PutRecordsRequestEntry{{PartitionKey: aws.String("k"), Data: []byte("x")}}})
	wantErr[*types.ResourceNotFoundException](t, "PutRecords to a missing stream", err)
	_, err = e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &missing, ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	wantErr[*types.ResourceNotFoundException](t, "GetShardIterator on a missing stream", err)
	_, err = e.api.DeleteStream(e.ctx, &kinesis.DeleteStreamInput{StreamName: &missing})
	wantErr[*types.ResourceNotFoundException](t, "DeleteStream of a missing stream", err)

	if _, err := e.api.DeleteStream(e.ctx, &kinesis.DeleteStreamInput{StreamName: &name}); err != nil {
		t.Fatalf("DeleteStream: %v", err)
	}
	// Deletion may pass through DELETING; it must end in ResourceNotFound.
	for {
		_, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
		if err != nil {
			wantErr[*types.ResourceNotFoundException](t, "DescribeStreamSummary after DeleteStream", err)
			break
		}
		select {
		case <-e.ctx.Done():
			t.Fatal("stream still exists at the deadline after DeleteStream")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// testEvenHashRanges checks the ranges of new streams: shard i of n ends at
// (i+1)*(2^128/n)-1, the last at 2^128-1. With 2 and 4 shards the division
// is exact (2 shards: shard 0 ends at 170141183460469231731687303715884105727,
// as on the service), so a server that divides 2^128-1 instead of 2^128
// fails there; with 5 it is not, so one that rounds up fails there.
func testEvenHashRanges(t *testing.T, e *env) {
	space, why := new(big.Int).Add(maxHash, big.NewInt(1)), ""
	if e.dev.HashRangesDivideMaxHash {
		space, why = maxHash, " (declared HashRangesDivideMaxHash)"
	}
	for _, n := range []int{2, 4, 5} {
		checkEvenHashRanges(t, n, e.shards(e.stream(int32(n))), space, why)
	}
}

func checkEvenHashRanges(t *testing.T, n int, shards []types.Shard, space *big.Int, why string) {
	t.Helper()
	if len(shards) != n {
		t.Fatalf("%d-shard stream: got %d shards", n, len(shards))
	}
	step := new(big.Int).Div(space, big.NewInt(int64(n)))
	next := new(big.Int)
	for i, s := range shards {
		start, end := hashBig(t, s.HashKeyRange.StartingHashKey), hashBig(t, s.HashKeyRange.EndingHashKey)
		wantEnd := new(big.Int).Sub(new(big.Int).Mul(step, big.NewInt(int64(i+1))), big.NewInt(1))
		if i == n-1 {
			wantEnd = maxHash
		}
		if start.Cmp(next) != 0 || end.Cmp(wantEnd) != 0 {
			t.Fatalf("%d-shard stream: shard %d range [%s, %s], want [%s, %s]%s", n, i, start, end, next, wantEnd, why)
		}
		next = new(big.Int).Add(end, big.NewInt(1))
		if s.SequenceNumberRange == nil || s.SequenceNumberRange.StartingSequenceNumber == nil || s.SequenceNumberRange.EndingSequenceNumber != nil {
			t.Fatalf("%d-shard stream: shard %d: want an open sequence range, got %+v", n, i, s.SequenceNumberRange)
		}
		if s.ParentShardId != nil || s.AdjacentParentShardId != nil {
			t.Fatalf("%d-shard stream: shard %d of a new stream has parents", n, i)
		}
	}
}

func testKeyRouting(t *testing.T, e *env) {
	name := e.stream(4)
	shards := e.shards(name)
	ks := keys("route", 60)
	ks = append(ks, ks[:10]...) // the same keys again
	puts := e.putAll(name, ks, payload)
	used := map[string]bool{}
	byKey := map[string]string{}
	for _, p := range puts {
		if want := owner(t, shards, md5Key(p.key)); p.shard != want {
			t.Fatalf("key %q went to %s, want %s (the shard whose range holds MD5 of the key)", p.key, p.shard, want)
		}
		if prev, ok := byKey[p.key]; ok && prev != p.shard {
			t.Fatalf("key %q went to %s and %s", p.key, prev, p.shard)
		}
		byKey[p.key] = p.shard
		used[p.shard] = true
	}
	if len(used) != 4 {
		t.Fatalf("60 keys used %d of 4 shards", len(used))
	}
	// The single-record call routes the same way.
	if p := e.putOne(name, "route-7", []byte("again")); p.shard != byKey["route-7"] {
		t.Fatalf("PutRecord routed route-7 to %s, PutRecords to %s", p.shard, byKey["route-7"])
	}
}

func testExplicitHashKey(t *testing.T, e *env) {
	name := e.stream(2)
	shards := e.shards(name)
	out, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: aws.String("any"), Data: []byte("x"), ExplicitHashKey: aws.String(maxHash.String())})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := aws.ToString(out.ShardId), aws.ToString(shards[1].ShardId); got != want {
		t.Fatalf("ExplicitHashKey 2^128-1 went to %s, want %s", got, want)
	}
	out, err = e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: aws.String("any"), Data: []byte("x"), ExplicitHashKey: aws.String("0")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := aws.ToString(out.ShardId), aws.ToString(shards[0].ShardId); got != want {
		t.Fatalf("ExplicitHashKey 0 went to %s, want %s", got, want)
	}
}

func testPerShardOrder(t *testing.T, e *env) {
	name := e.stream(2)
	var want []put
	for i := range 15 {
		want = append(want, e.putOne(name, "order", payload(i)))
	}
	same := make([]string, 30)
	for i := range same {
		same[i] = "order"
	}
	want = append(want, e.putAll(name, same, func(i int) []byte { return payload(100 + i) })...)
	prev := big.NewInt(-1)
	for i, p := range want {
		if p.shard != want[0].shard {
			t.Fatalf("record %d of one key went to %s, earlier ones to %s", i, p.shard, want[0].shard)
		}
		seq := seqBig(t, p.seq)
		if seq.Cmp(prev) <= 0 {
			t.Fatalf("sequence number %d (%s) is not greater than the one before (%s)", i, seq, prev)
		}
		prev = seq
	}
	got, _ := e.readN(e.iterator(name, want[0].shard, types.ShardIteratorTypeTrimHorizon, "", nil), len(want))
	sameData(t, "TRIM_HORIZON read", got, want)
}

func testIteratorTypes(t *testing.T, e *env) {
	name := e.stream(1)
	shard := aws.ToString(e.shards(name)[0].ShardId)
	puts := e.putAll(name, keys("it", 10), payload)

	got, _ := e.readN(e.iterator(name, shard, types.ShardIteratorTypeTrimHorizon, "", nil), 10)
	sameData(t, "TRIM_HORIZON", got, puts)

	got, _ = e.readN(e.iterator(name, shard, types.ShardIteratorTypeAtSequenceNumber, puts[3].seq, nil), 7)
	sameData(t, "AT_SEQUENCE_NUMBER of record 3", got, puts[3:])

	got, _ = e.readN(e.iterator(name, shard, types.ShardIteratorTypeAfterSequenceNumber, puts[3].seq, nil), 6)
	sameData(t, "AFTER_SEQUENCE_NUMBER of record 3", got, puts[4:])

	latest := e.iterator(name, shard, types.ShardIteratorTypeLatest, "", nil)
	out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &latest})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 0 || out.NextShardIterator == nil {
		t.Fatalf("LATEST before a new record: %d records, next iterator %v; want none and an iterator", len(out.Records), out.NextShardIterator != nil)
	}
	fresh := e.putOne(name, "it-new", []byte("fresh"))
	got, _ = e.readN(*out.NextShardIterator, 1)
	sameData(t, "LATEST after a new record", got, []put{fresh})

	// An iterator from before the new record, read now, also sees only it.
	got, _ = e.readN(latest, 1)
	sameData(t, "LATEST iterator re-read", got, []put{fresh})
}

func testAtTimestamp(t *testing.T, e *env) {
	name := e.stream(1)
	shard := aws.ToString(e.shards(name)[0].ShardId)
	puts := e.putAll(name, keys("ts", 6), payload)
	all, _ := e.readN(e.iterator(name, shard, types.ShardIteratorTypeTrimHorizon, "", nil), 6)
	sameData(t, "TRIM_HORIZON", all, puts)

	// From the arrival time of record 3: every record that arrived at or
	// after it, and no earlier one.
	ts := *all[3].ApproximateArrivalTimestamp
	first := 0
	for first < len(all) && all[first].ApproximateArrivalTimestamp.Before(ts) {
		first++
	}
	got, _ := e.readN(e.iterator(name, shard, types.ShardIteratorTypeAtTimestamp, "", &ts), len(all)-first)
	sameData(t, "AT_TIMESTAMP of record 3", got, puts[first:])

	// A timestamp before the stream existed reads from the start.
	early := ts.Add(-time.Hour)
	got, _ = e.readN(e.iterator(name, shard, types.ShardIteratorTypeAtTimestamp, "", &early), len(all))
	sameData(t, "AT_TIMESTAMP an hour earlier", got, puts)

	if !e.dev.AtTimestampPastEndHangs {
		past := all[len(all)-1].ApproximateArrivalTimestamp.Add(time.Millisecond)
		time.Sleep(time.Until(past)) // at most 1 ms: a timestamp in the future is an error
		it := e.iterator(name, shard, types.ShardIteratorTypeAtTimestamp, "", &past)
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Records) != 0 || out.NextShardIterator == nil {
			t.Fatalf("AT_TIMESTAMP after the last record: %d records; want none and an iterator", len(out.Records))
		}
	}

	future := time.Now().Add(time.Hour)
	_, err := e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &shard, ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: &future})
	wantErr[*types.InvalidArgumentException](t, "AT_TIMESTAMP in the future", err)
}

func testIteratorErrors(t *testing.T, e *env) {
	name := e.stream(2)
	shards := e.shards(name)
	s0, s1 := aws.ToString(shards[0].ShardId), aws.ToString(shards[1].ShardId)
	p := e.putAll(name, []string{"x"}, payload)[0]
	other := s0
	if p.shard == s0 {
		other = s1
	}

	_, err := e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: aws.String("shardId-000000000099"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	wantErr[*types.ResourceNotFoundException](t, "GetShardIterator on a missing shard", err)

	_, err = e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &other, ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: &p.seq})
	if e.dev.AcceptsOtherShardsSequenceNumber {
		if err != nil {
			t.Errorf("declared AcceptsOtherShardsSequenceNumber, but AT_SEQUENCE_NUMBER with another shard's sequence number failed: %v", err)
		}
	} else {
		wantErr[*types.InvalidArgumentException](t, "AT_SEQUENCE_NUMBER with another shard's sequence number", err)
	}

	_, err = e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &p.shard, ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: aws.String("12345")})
	if e.dev.UnknownSequenceNumberIsNotFound {
		wantErr[*types.ResourceNotFoundException](t, "AT_SEQUENCE_NUMBER with a made-up sequence number (declared UnknownSequenceNumberIsNotFound)", err)
	} else {
		wantErr[*types.InvalidArgumentException](t, "AT_SEQUENCE_NUMBER with a made-up sequence number", err)
	}

	_, err = e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &p.shard, ShardIteratorType: types.ShardIteratorTypeTrimHorizon, StartingSequenceNumber: &p.seq})
	if e.dev.IgnoresNeedlessSequenceNumber {
		if err != nil {
			t.Errorf("declared IgnoresNeedlessSequenceNumber, but TRIM_HORIZON with a sequence number failed: %v", err)
		}
	} else {
		wantErr[*types.InvalidArgumentException](t, "TRIM_HORIZON with a sequence number", err)
	}

	_, err = e.api.GetShardIterator(e.ctx, &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &p.shard, ShardIteratorType: types.ShardIteratorTypeAtTimestamp})
	wantErr[*types.InvalidArgumentException](t, "AT_TIMESTAMP without a timestamp", err)

	_, err = e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("bm90LWFuLWl0ZXJhdG9y")})
	if e.dev.MadeUpIteratorIsServerError {
		if re, ok := errors.AsType[*smithyhttp.ResponseError](err); !ok || re.HTTPStatusCode() != 500 {
			t.Errorf("declared MadeUpIteratorIsServerError, but GetRecords with a made-up iterator answered %v", err)
		}
	} else {
		wantErr[*types.InvalidArgumentException](t, "GetRecords with a made-up iterator", err)
	}

	// An iterator of a deleted stream.
	it := e.iterator(name, p.shard, types.ShardIteratorTypeTrimHorizon, "", nil)
	if _, err := e.api.DeleteStream(e.ctx, &kinesis.DeleteStreamInput{StreamName: &name}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err = e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
		if err != nil {
			wantErr[*types.ResourceNotFoundException](t, "GetRecords on a deleted stream", err)
			return
		}
		select { // a server that deletes asynchronously answers for a moment
		case <-e.ctx.Done():
			t.Fatal("GetRecords still answers at the deadline after DeleteStream")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func testGetRecordsLimit(t *testing.T, e *env) {
	name := e.stream(1)
	shard := aws.ToString(e.shards(name)[0].ShardId)
	puts := e.putAll(name, keys("limit", 10), payload)
	it := e.iterator(name, shard, types.ShardIteratorTypeTrimHorizon, "", nil)
	var got []types.Record
	var sizes []int
	for len(got) < len(puts) {
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it, Limit: aws.Int32(3)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Records) > 3 {
			t.Fatalf("Limit 3 returned %d records", len(out.Records))
		}
		if out.MillisBehindLatest == nil {
			t.Fatal("GetRecords without MillisBehindLatest")
		}
		sizes = append(sizes, len(out.Records))
		got = append(got, out.Records...)
		it = *out.NextShardIterator
	}
	sameData(t, "reads with Limit 3", got, puts)
	if len(sizes) != 4 || sizes[0] != 3 || sizes[3] != 1 {
		t.Fatalf("10 records with Limit 3 came in pages %v, want [3 3 3 1]", sizes)
	}
	out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 0 || aws.ToInt64(out.MillisBehindLatest) != 0 {
		t.Fatalf("read at the tip: %d records, %d ms behind; want none and 0", len(out.Records), aws.ToInt64(out.MillisBehindLatest))
	}
}

func testListShardsPages(t *testing.T, e *env) {
	name := e.stream(5)
	out, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: &name, MaxResults: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	pages := 1
	for {
		for _, s := range out.Shards {
			ids = append(ids, aws.ToString(s.ShardId))
		}
		if !e.dev.ListShardsIgnoresMaxResults && len(out.Shards) > 2 {
			t.Fatalf("MaxResults 2 returned %d shards", len(out.Shards))
		}
		if out.NextToken == nil {
			break
		}
		pages++
		if out, err = e.api.ListShards(e.ctx, &kinesis.ListShardsInput{NextToken: out.NextToken, MaxResults: aws.Int32(2)}); err != nil {
			t.Fatal(err)
		}
	}
	if !e.dev.ListShardsIgnoresMaxResults && pages != 3 {
		t.Fatalf("5 shards with MaxResults 2 came in %d pages, want 3", pages)
	}
	want := []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003", "shardId-000000000004"}
	if len(ids) != len(want) {
		t.Fatalf("listed %v, want %v", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("listed %v, want %v", ids, want)
		}
	}
	after, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: &name, ExclusiveStartShardId: aws.String(want[2])})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Shards) != 2 || aws.ToString(after.Shards[0].ShardId) != want[3] {
		t.Fatalf("ExclusiveStartShardId %s listed %d shards starting %v", want[2], len(after.Shards), after.Shards)
	}
	_, err = e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: &name, NextToken: aws.String("x")})
	wantErr[*types.InvalidArgumentException](t, "ListShards with both StreamName and NextToken", err)
}

func testSplit(t *testing.T, e *env) {
	name := e.stream(1)
	parent := e.shards(name)[0]
	pid := aws.ToString(parent.ShardId)
	before := e.putAll(name, keys("split", 8), payload)
	mid := new(big.Int).Rsh(maxHash, 1)
	if _, err := e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &pid, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	e.waitActive(name)

	shards := e.shards(name)
	if len(shards) != 3 {
		t.Fatalf("after a split: %d shards, want 3", len(shards))
	}
	p := find(shards, pid)
	if p == nil || p.SequenceNumberRange.EndingSequenceNumber == nil {
		t.Fatalf("the split parent is not listed as closed: %+v", p)
	}
	if e.dev.ClosedShardEndsAtMaxLong {
		if got := *p.SequenceNumberRange.EndingSequenceNumber; got != maxLong {
			t.Errorf("declared ClosedShardEndsAtMaxLong, but the split parent ends at %s", got)
		}
	} else {
		end := seqBig(t, *p.SequenceNumberRange.EndingSequenceNumber)
		for _, b := range before {
			if seqBig(t, b.seq).Cmp(end) > 0 {
				t.Fatalf("record %s is after the parent's EndingSequenceNumber %s", b.seq, end)
			}
		}
	}
	var kids []types.Shard
	for _, s := range shards {
		if aws.ToString(s.ParentShardId) == pid {
			kids = append(kids, s)
			if s.AdjacentParentShardId != nil || s.SequenceNumberRange.EndingSequenceNumber != nil {
				t.Fatalf("split child %s: adjacent parent %v, closed %v", aws.ToString(s.ShardId), s.AdjacentParentShardId, s.SequenceNumberRange.EndingSequenceNumber)
			}
		}
	}
	if len(kids) != 2 {
		t.Fatalf("split made %d children of %s, want 2", len(kids), pid)
	}
	lo, hi := kids[0], kids[1]
	if hashBig(t, lo.HashKeyRange.StartingHashKey).Cmp(hashBig(t, hi.HashKeyRange.StartingHashKey)) > 0 {
		lo, hi = hi, lo
	}
	if hashBig(t, lo.HashKeyRange.StartingHashKey).Sign() != 0 ||
		hashBig(t, lo.HashKeyRange.EndingHashKey).Cmp(new(big.Int).Sub(mid, big.NewInt(1))) != 0 ||
		hashBig(t, hi.HashKeyRange.StartingHashKey).Cmp(mid) != 0 ||
		hashBig(t, hi.HashKeyRange.EndingHashKey).Cmp(maxHash) != 0 {
		t.Fatalf("split children ranges [%s,%s] [%s,%s], want [0,%s] [%s,%s]",
			*lo.HashKeyRange.StartingHashKey, *lo.HashKeyRange.EndingHashKey, *hi.HashKeyRange.StartingHashKey, *hi.HashKeyRange.EndingHashKey,
			new(big.Int).Sub(mid, big.NewInt(1)), mid, maxHash)
	}

	// New records go to the children, by hash key.
	after := e.putAll(name, keys("split-after", 20), payload)
	for _, a := range after {
		if want := owner(t, shards, md5Key(a.key)); a.shard != want {
			t.Fatalf("after the split %q went to %s, want %s", a.key, a.shard, want)
		}
	}

	// The closed parent keeps its records and ends.
	got, last := e.readToEnd(e.iterator(name, pid, types.ShardIteratorTypeTrimHorizon, "", nil))
	sameData(t, "the closed parent", got, before)
	if !e.dev.NoChildShards {
		if len(last.ChildShards) != 2 {
			t.Fatalf("the end of a split parent lists %d ChildShards, want 2", len(last.ChildShards))
		}
		for _, c := range last.ChildShards {
			if len(c.ParentShards) != 1 || c.ParentShards[0] != pid || find(kids, aws.ToString(c.ShardId)) == nil {
				t.Fatalf("ChildShard %s with parents %v; want one of the children with parent %s", aws.ToString(c.ShardId), c.ParentShards, pid)
			}
		}
	}
	// LATEST on a closed shard ends at once.
	if got, _ := e.readToEnd(e.iterator(name, pid, types.ShardIteratorTypeLatest, "", nil)); len(got) != 0 {
		t.Fatalf("LATEST on the closed parent read %d records", len(got))
	}
}

func testMerge(t *testing.T, e *env) {
	name := e.stream(2)
	shards := e.shards(name)
	a, b := aws.ToString(shards[0].ShardId), aws.ToString(shards[1].ShardId)
	before := e.putAll(name, keys("merge", 20), payload)
	if _, err := e.api.MergeShards(e.ctx, &kinesis.MergeShardsInput{StreamName: &name, ShardToMerge: &a, AdjacentShardToMerge: &b}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	e.waitActive(name)
	shards = e.shards(name)
	if len(shards) != 3 {
		t.Fatalf("after a merge: %d shards, want 3", len(shards))
	}
	var child *types.Shard
	for i := range shards {
		if aws.ToString(shards[i].ParentShardId) == a {
			child = &shards[i]
		}
	}
	if child == nil || aws.ToString(child.AdjacentParentShardId) != b {
		t.Fatalf("merge child: %+v; want ParentShardId %s and AdjacentParentShardId %s", child, a, b)
	}
	if hashBig(t, child.HashKeyRange.StartingHashKey).Sign() != 0 || hashBig(t, child.HashKeyRange.EndingHashKey).Cmp(maxHash) != 0 {
		t.Fatalf("merge child range [%s, %s], want the whole key space", *child.HashKeyRange.StartingHashKey, *child.HashKeyRange.EndingHashKey)
	}
	for _, id := range []string{a, b} {
		if s := find(shards, id); s.SequenceNumberRange.EndingSequenceNumber == nil {
			t.Fatalf("merged parent %s is still open", id)
		}
	}
	for _, p := range e.putAll(name, keys("merge-after", 5), payload) {
		if p.shard != aws.ToString(child.ShardId) {
			t.Fatalf("after the merge %q went to %s, want %s", p.key, p.shard, aws.ToString(child.ShardId))
		}
	}
	for _, id := range []string{a, b} {
		var want []put
		for _, p := range before {
			if p.shard == id {
				want = append(want, p)
			}
		}
		got, last := e.readToEnd(e.iterator(name, id, types.ShardIteratorTypeTrimHorizon, "", nil))
		sameData(t, "merged parent "+id, got, want)
		if !e.dev.NoChildShards {
			if len(last.ChildShards) != 1 || aws.ToString(last.ChildShards[0].ShardId) != aws.ToString(child.ShardId) ||
				len(last.ChildShards[0].ParentShards) != 2 {
				t.Fatalf("end of merged parent %s: ChildShards %+v; want the child with both parents", id, last.ChildShards)
			}
		}
	}
}

func testReshardErrors(t *testing.T, e *env) {
	name := e.stream(3)
	shards := e.shards(name)
	s0, s1, s2 := aws.ToString(shards[0].ShardId), aws.ToString(shards[1].ShardId), aws.ToString(shards[2].ShardId)

	_, err := e.api.MergeShards(e.ctx, &kinesis.MergeShardsInput{StreamName: &name, ShardToMerge: &s0, AdjacentShardToMerge: &s2})
	wantErr[*types.InvalidArgumentException](t, "MergeShards of shards that are not adjacent", err)

	// On shard 2, which nothing below uses: a server that accepts this
	// closes it.
	_, err = e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &s2, NewStartingHashKey: shards[2].HashKeyRange.StartingHashKey})
	if e.dev.SplitsAtOwnStartingHashKey {
		if err != nil {
			t.Errorf("declared SplitsAtOwnStartingHashKey, but SplitShard at the shard's own starting hash key failed: %v", err)
		}
		e.waitActive(name)
	} else {
		wantErr[*types.InvalidArgumentException](t, "SplitShard at the shard's own starting hash key", err)
	}

	_, err = e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: aws.String("shardId-000000000042"), NewStartingHashKey: aws.String("1")})
	wantErr[*types.ResourceNotFoundException](t, "SplitShard of a missing shard", err)

	mid := new(big.Int).Add(hashBig(t, shards[0].HashKeyRange.StartingHashKey), big.NewInt(1000)).String()
	if _, err := e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &s0, NewStartingHashKey: &mid}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	e.waitActive(name)
	// A closed shard is an argument that cannot be used, so the service
	// answers InvalidArgumentException ("... has already been merged or
	// split, and thus is not eligible for merging or splitting");
	// ResourceInUseException is documented for a stream that is not ACTIVE,
	// and the stream is ACTIVE.
	_, err = e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &s0, NewStartingHashKey: &mid})
	if e.dev.ReshardsClosedShards {
		if err != nil {
			t.Errorf("declared ReshardsClosedShards, but SplitShard of a closed shard failed: %v", err)
		}
		return // the stream's shards are no longer what the rest expects
	}
	_, merr := e.api.MergeShards(e.ctx, &kinesis.MergeShardsInput{StreamName: &name, ShardToMerge: &s0, AdjacentShardToMerge: &s1})
	if e.dev.ReshardClosedShardIsResourceInUse {
		wantErr[*types.ResourceInUseException](t, "SplitShard of a closed shard (declared ReshardClosedShardIsResourceInUse)", err)
		wantErr[*types.ResourceInUseException](t, "MergeShards of a closed shard (declared ReshardClosedShardIsResourceInUse)", merr)
		return
	}
	wantErr[*types.InvalidArgumentException](t, "SplitShard of a closed shard", err)
	wantErr[*types.InvalidArgumentException](t, "MergeShards of a closed shard", merr)
}

// testThrottling exceeds a shard's limits of 5 reads and 1,000 records a
// second and expects the service's throttling answers.
//
// With NoThrottling the same burst must go through untouched.
func testThrottling(t *testing.T, e *env) {
	name := e.stream(1)
	shard := aws.ToString(e.shards(name)[0].ShardId)
	entries := make([]types.PutRecordsRequestEntry, 500)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String("hot"), Data: payload(i)}
	}
	// 2,500 records at least: over the limit even if split across two
	// seconds. Without NoThrottling the burst goes on (up to 10,000) until
	// one is throttled: a loaded machine may send the first 2,500 slower
	// than the limit.
	failed, sent := 0, 0
	began := time.Now()
	for calls := 0; calls < 5 || (!e.dev.NoThrottling && failed == 0 && calls < 20); calls++ {
		out, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: entries})
		if err != nil {
			t.Fatalf("PutRecords: %v", err)
		}
		sent += len(entries)
		for _, r := range out.Records {
			if r.ErrorCode != nil {
				if *r.ErrorCode != "ProvisionedThroughputExceededException" {
					t.Fatalf("entry failed with %s, want ProvisionedThroughputExceededException", *r.ErrorCode)
				}
				failed++
			}
		}
	}
	took := time.Since(began)
	switch {
	case e.dev.NoThrottling:
		if failed != 0 {
			t.Errorf("declared NoThrottling, but %d of %d records to one shard in a burst were throttled", failed, sent)
		}
	case failed == 0 && float64(sent)/took.Seconds() > 2000:
		t.Fatalf("%d records to one shard in %v (over twice the limit of 1,000 a second): none throttled", sent, took.Round(time.Millisecond))
	case failed == 0:
		t.Skipf("%d records to one shard took %v: this machine sent them slower than twice the limit, so the burst shows nothing", sent, took.Round(time.Millisecond))
	}

	it := e.iterator(name, shard, types.ShardIteratorTypeLatest, "", nil)
	for i := range 20 {
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
		if err != nil {
			if e.dev.NoThrottling {
				t.Fatalf("declared NoThrottling, but GetRecords %d of a burst of 20 on one shard failed: %v", i+1, err)
			}
			wantErr[*types.ProvisionedThroughputExceededException](t, "GetRecords over the read limit", err)
			return
		}
		if e.dev.NoThrottling {
			it = aws.ToString(out.NextShardIterator)
			continue
		}
		if i == 19 {
			t.Fatal("20 GetRecords on one shard in a burst: none throttled")
		}
	}
}

// testShardFilter lists a split stream with the filters a consumer uses to
// find where to start.
//
// With IgnoresShardFilter every filter must list every shard; with
// ShardFilterAtTrimHorizonListsAll, AT_TRIM_HORIZON must.
func testShardFilter(t *testing.T, e *env) {
	name := e.stream(2)
	s0 := "shardId-000000000000"
	mid := new(big.Int).Rsh(maxHash, 2).String() // inside shard 0's range
	if _, err := e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &s0, NewStartingHashKey: &mid}); err != nil {
		t.Fatal(err)
	}
	e.waitActive(name)
	list := func(f types.ShardFilter) []string {
		out, err := e.api.ListShards(e.ctx, &kinesis.ListShardsInput{StreamName: &name, ShardFilter: &f})
		if err != nil {
			t.Fatalf("ListShards %s: %v", f.Type, err)
		}
		var ids []string
		for _, s := range out.Shards {
			ids = append(ids, aws.ToString(s.ShardId))
		}
		return ids
	}
	cases := []struct {
		filter types.ShardFilter
		want   []string
	}{
		{types.ShardFilter{Type: types.ShardFilterTypeAtLatest}, []string{"shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTrimHorizon}, []string{"shardId-000000000000", "shardId-000000000001"}},
		{types.ShardFilter{Type: types.ShardFilterTypeFromTrimHorizon}, []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}},
		{types.ShardFilter{Type: types.ShardFilterTypeAfterShardId, ShardId: aws.String("shardId-000000000001")}, []string{"shardId-000000000002", "shardId-000000000003"}},
	}
	every := []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}
	for _, c := range cases {
		want, why := c.want, ""
		switch {
		case e.dev.IgnoresShardFilter:
			want, why = every, " (declared IgnoresShardFilter)"
		case e.dev.ShardFilterAtTrimHorizonListsAll && c.filter.Type == types.ShardFilterTypeAtTrimHorizon:
			want, why = every, " (declared ShardFilterAtTrimHorizonListsAll)"
		}
		got := list(c.filter)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("ShardFilter %s: %v, want %v%s", c.filter.Type, got, want, why)
		}
	}
}

// testPartitionKeyLength pins the service's key rule at its edges: 1 to 256
// UTF-16 units, so a character outside the Basic Multilingual Plane counts
// two and a BMP character one whatever its UTF-8 size; and a PutRecords
// request with one bad key is refused whole, its valid entries too.
func testPartitionKeyLength(t *testing.T, e *env) {
	name := e.stream(1)
	emoji, han := "\U0001F69A", "中" // 4 bytes, 2 units; 3 bytes, 1 unit
	cases := []struct {
		name string
		key  string
		ok   bool
	}{
		{"256 ASCII", strings.Repeat("k", 256), true},
		{"257 ASCII", strings.Repeat("k", 257), false},
		{"256 three-byte BMP characters", strings.Repeat(han, 256), true},
		{"128 astral characters (256 units)", strings.Repeat(emoji, 128), true},
		{"129 astral characters (258 units)", strings.Repeat(emoji, 129), false},
		{"254 ASCII and one astral character (256 units)", strings.Repeat("k", 254) + emoji, true},
		{"255 ASCII and one astral character (257 units)", strings.Repeat("k", 255) + emoji, false},
		{"empty", "", false},
	}
	for _, c := range cases {
		_, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: aws.String(c.key), Data: []byte("x")})
		if c.ok && err != nil {
			t.Errorf("%s: PutRecord refused a valid key: %v", c.name, err)
		}
		if !c.ok {
			wantCode(t, c.name, err, e.keyLengthError())
		}
	}
	_, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: []types.PutRecordsRequestEntry{
		{PartitionKey: aws.String("good"), Data: []byte("x")},
		{PartitionKey: aws.String(strings.Repeat(emoji, 129)), Data: []byte("x")},
	}})
	wantCode(t, "PutRecords with one over-long key", err, e.keyLengthError())
}

// keyLengthError is the error code a partition key of bad length gets.
func (e *env) keyLengthError() string {
	if e.dev.KeyLengthIsInvalidArgument {
		return "InvalidArgumentException"
	}
	return "ValidationException"
}
