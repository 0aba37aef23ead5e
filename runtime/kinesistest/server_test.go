package kinesistest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// clock is a settable clock for retention and expiry tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustStream(t *testing.T, s *kinesistest.Server, name string, shards int) {
	t.Helper()
	if err := s.AddStream(name, shards); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, s *kinesistest.Server, stream, key, data string) *kinesis.PutRecordOutput {
	t.Helper()
	out, err := s.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: &stream, PartitionKey: &key, Data: []byte(data)})
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	return out
}

func iter(t *testing.T, s *kinesistest.Server, stream, shard string, typ types.ShardIteratorType) string {
	t.Helper()
	out, err := s.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: &stream, ShardId: &shard, ShardIteratorType: typ})
	if err != nil {
		t.Fatalf("GetShardIterator: %v", err)
	}
	return *out.ShardIterator
}

func get(t *testing.T, ctx context.Context, s *kinesistest.Server, it string) *kinesis.GetRecordsOutput {
	t.Helper()
	out, err := s.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	return out
}

func data(recs []types.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func wantAs[T error](t *testing.T, what string, err error) T {
	t.Helper()
	v, ok := errors.AsType[T](err)
	if !ok {
		var zero T
		t.Fatalf("%s: got %v, want %T", what, err, zero)
	}
	return v
}

const shard0 = "shardId-000000000000"

func TestRetentionTrimsRecordsAndClosedShards(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithRetention(time.Hour), kinesistest.WithIteratorTTL(24*time.Hour))
	mustStream(t, s, "ret", 1)
	put(t, s, "ret", "k", "old")
	clk.Advance(30 * time.Minute)
	put(t, s, "ret", "k", "new")
	it := iter(t, s, "ret", shard0, types.ShardIteratorTypeTrimHorizon)
	clk.Advance(40 * time.Minute) // "old" is now 70 minutes old

	if got := data(get(t, testCtx(t), s, it).Records); len(got) != 1 || got[0] != "new" {
		t.Fatalf("TRIM_HORIZON after retention: %v, want [new]", got)
	}
	recs, err := s.Records("ret")
	if err != nil || len(recs) != 1 || string(recs[0].Data) != "new" {
		t.Fatalf("Records after retention: %v %v, want just new", recs, err)
	}

	// A closed shard stays listed while it may hold records, then goes.
	_, err = s.SplitShard(testCtx(t), &kinesis.SplitShardInput{StreamName: aws.String("ret"), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("1000")})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Minute)
	if n := len(listShards(t, s, "ret", nil)); n != 3 {
		t.Fatalf("59 minutes after the split: %d shards listed, want 3", n)
	}
	clk.Advance(2 * time.Minute)
	ids := listShards(t, s, "ret", nil)
	if len(ids) != 2 || ids[0] == shard0 {
		t.Fatalf("past retention after the split: %v, want the two children only", ids)
	}
}

func listShards(t *testing.T, s *kinesistest.Server, stream string, f *types.ShardFilter) []string {
	t.Helper()
	out, err := s.ListShards(testCtx(t), &kinesis.ListShardsInput{StreamName: &stream, ShardFilter: f})
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	ids := make([]string, len(out.Shards))
	for i, sh := range out.Shards {
		ids[i] = *sh.ShardId
	}
	return ids
}

func TestIteratorsExpire(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now))
	mustStream(t, s, "exp", 1)
	put(t, s, "exp", "k", "a")
	it := iter(t, s, "exp", shard0, types.ShardIteratorTypeTrimHorizon)
	clk.Advance(5 * time.Minute)
	out := get(t, testCtx(t), s, it) // exactly 5 minutes old: still valid, as in the service
	clk.Advance(5*time.Minute + time.Millisecond)
	_, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
	wantAs[*types.ExpiredIteratorException](t, "GetRecords with a 10-minute-old iterator", err)
	_, err = s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
	wantAs[*types.ExpiredIteratorException](t, "GetRecords with a NextShardIterator 5m1ms old", err)

	short := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithIteratorTTL(time.Second))
	mustStream(t, short, "exp", 1)
	it = iter(t, short, "exp", shard0, types.ShardIteratorTypeLatest)
	clk.Advance(1001 * time.Millisecond)
	_, err = short.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
	wantAs[*types.ExpiredIteratorException](t, "GetRecords past WithIteratorTTL(1s)", err)
}

func TestLongPollWakesOnPublish(t *testing.T) {
	s := kinesistest.New(kinesistest.WithLongPoll(time.Minute))
	mustStream(t, s, "lp", 1)
	it := iter(t, s, "lp", shard0, types.ShardIteratorTypeLatest)
	type result struct {
		out *kinesis.GetRecordsOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
		done <- result{out, err}
	}()
	start := time.Now()
	put(t, s, "lp", "k", "hello")
	r := <-done
	if r.err != nil || len(r.out.Records) != 1 || string(r.out.Records[0].Data) != "hello" {
		t.Fatalf("long-polling GetRecords: %v, %v; want the published record", r.out, r.err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the publish did not wake the long poll")
	}

	// A long poll is bounded by its context...
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: r.out.NextShardIterator})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetRecords past its context deadline: %v, want DeadlineExceeded", err)
	}

	// ...and by WithLongPoll, after which it answers empty.
	quick := kinesistest.New(kinesistest.WithLongPoll(10 * time.Millisecond))
	mustStream(t, quick, "lp", 1)
	out := get(t, testCtx(t), quick, iter(t, quick, "lp", shard0, types.ShardIteratorTypeLatest))
	if len(out.Records) != 0 || out.NextShardIterator == nil {
		t.Fatalf("long poll that timed out: %d records, iterator %v", len(out.Records), out.NextShardIterator)
	}

	// Closing the shard ends a long poll on it with the shard's end.
	go func() {
		out, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: r.out.NextShardIterator})
		done <- result{out, err}
	}()
	if _, err := s.SplitShard(testCtx(t), &kinesis.SplitShardInput{StreamName: aws.String("lp"), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("99999")}); err != nil {
		t.Fatal(err)
	}
	r = <-done
	if r.err != nil || r.out.NextShardIterator != nil || len(r.out.ChildShards) != 2 {
		t.Fatalf("long poll on a shard being split: err %v; want the shard's end with 2 children", r.err)
	}
}

func TestWaitForRecords(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "w", 1)
	it := iter(t, s, "w", shard0, types.ShardIteratorTypeLatest)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.WaitForRecords(ctx, it); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRecords with nothing published: %v, want DeadlineExceeded", err)
	}

	woke := make(chan error, 1)
	go func() { woke <- s.WaitForRecords(testCtx(t), it) }()
	put(t, s, "w", "k", "x")
	if err := <-woke; err != nil {
		t.Fatalf("WaitForRecords after a publish: %v", err)
	}
	if got := data(get(t, testCtx(t), s, it).Records); len(got) != 1 || got[0] != "x" {
		t.Fatalf("after WaitForRecords: %v", got)
	}

	// The hook is discoverable the way the runtime looks for it.
	var api any = s
	if _, ok := api.(interface {
		WaitForRecords(context.Context, string) error
	}); !ok {
		t.Fatal("Server does not offer WaitForRecords(ctx, iterator)")
	}

	if _, err := s.DeleteStream(testCtx(t), &kinesis.DeleteStreamInput{StreamName: aws.String("w")}); err != nil {
		t.Fatal(err)
	}
	wantAs[*types.ResourceNotFoundException](t, "WaitForRecords on a deleted stream", s.WaitForRecords(testCtx(t), it))
}

func TestInjectPutFault(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "f", 2)
	s.InjectPutFault(func(stream, key string) error {
		if key == "bad" {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
		}
		return nil
	})
	out, err := s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("f"), Records: []types.PutRecordsRequestEntry{
		{PartitionKey: aws.String("a"), Data: []byte("1")},
		{PartitionKey: aws.String("bad"), Data: []byte("2")},
		{PartitionKey: aws.String("c"), Data: []byte("3")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt32(out.FailedRecordCount) != 1 {
		t.Fatalf("FailedRecordCount %d, want 1", aws.ToInt32(out.FailedRecordCount))
	}
	bad := out.Records[1]
	if aws.ToString(bad.ErrorCode) != "ProvisionedThroughputExceededException" || bad.SequenceNumber != nil || !strings.Contains(aws.ToString(bad.ErrorMessage), "slow down") {
		t.Fatalf("failed entry %+v", bad)
	}
	if out.Records[0].SequenceNumber == nil || out.Records[2].SequenceNumber == nil {
		t.Fatal("entries around the failed one were not stored")
	}
	recs, _ := s.Records("f")
	if len(recs) != 2 {
		t.Fatalf("stored %d records, want 2 (the failed entry must not be stored)", len(recs))
	}
	_, err = s.PutRecord(testCtx(t), &kinesis.PutRecordInput{StreamName: aws.String("f"), PartitionKey: aws.String("bad"), Data: []byte("x")})
	wantAs[*types.ProvisionedThroughputExceededException](t, "PutRecord of a faulted key", err)

	s.InjectPutFault(func(string, string) error { return errors.New("disk on fire") })
	out, _ = s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("f"), Records: []types.PutRecordsRequestEntry{{PartitionKey: aws.String("a"), Data: []byte("1")}}})
	if aws.ToString(out.Records[0].ErrorCode) != "InternalFailure" {
		t.Fatalf("a plain error's ErrorCode is %q, want InternalFailure", aws.ToString(out.Records[0].ErrorCode))
	}

	s.InjectPutFault(nil)
	put(t, s, "f", "bad", "now fine")
}

func TestInjectCallFault(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "f", 2)
	put(t, s, "f", "k", "x")
	var mu sync.Mutex
	var seen []kinesistest.Call
	fail := 1
	s.InjectCallFault(func(c kinesistest.Call) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c)
		if c.Op == kinesistest.OpGetRecords && fail > 0 {
			fail--
			return &types.ProvisionedThroughputExceededException{Message: aws.String("throttled")}
		}
		return nil
	})
	out, _ := s.ListShards(testCtx(t), &kinesis.ListShardsInput{StreamName: aws.String("f")})
	var it string
	for _, sh := range out.Shards {
		it = iter(t, s, "f", *sh.ShardId, types.ShardIteratorTypeTrimHorizon)
		if st, _ := s.ShardStats("f", *sh.ShardId); st.Puts == 1 {
			break
		}
	}
	_, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
	wantAs[*types.ProvisionedThroughputExceededException](t, "injected GetRecords fault", err)
	// The iterator survives the failed call.
	if got := data(get(t, testCtx(t), s, it).Records); len(got) != 1 {
		t.Fatalf("retry after the fault: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	last := seen[len(seen)-1]
	if last.Op != kinesistest.OpGetRecords || last.Stream != "f" || !strings.HasPrefix(last.Shard, "shardId-") {
		t.Fatalf("the hook saw %+v for GetRecords", last)
	}
}

func TestCounters(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "c", 1)
	it := iter(t, s, "c", shard0, types.ShardIteratorTypeTrimHorizon)
	for range 3 {
		it = *get(t, testCtx(t), s, it).NextShardIterator
	}
	put(t, s, "c", "k", "x")
	get(t, testCtx(t), s, it)
	st, ok := s.ShardStats("c", shard0)
	if !ok || st.GetRecords != 4 || st.EmptyGetRecords != 3 || st.Puts != 1 {
		t.Fatalf("ShardStats = %+v, %v; want 4 GetRecords, 3 empty, 1 put", st, ok)
	}
	if n := s.Calls(kinesistest.OpGetRecords); n != 4 {
		t.Fatalf("Calls(GetRecords) = %d, want 4", n)
	}
	if _, ok := s.ShardStats("c", "shardId-000000000009"); ok {
		t.Fatal("ShardStats of a missing shard reported ok")
	}
}

func TestRequestValidation(t *testing.T) {
	s := kinesistest.New(kinesistest.WithShardLimit(8))
	ctx := testCtx(t)
	mustStream(t, s, "v", 1)
	entry := types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: []byte("x")}
	many := make([]types.PutRecordsRequestEntry, 501)
	for i := range many {
		many[i] = entry
	}
	cases := []struct {
		name string
		call func() error
		want func(error) bool
	}{
		{"PutRecords with no entries", func() error {
			_, err := s.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("v")})
			return err
		}, is[*types.ValidationException]},
		{"PutRecords with 501 entries", func() error {
			_, err := s.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("v"), Records: many})
			return err
		}, is[*types.ValidationException]},
		{"a 257-character key", func() error {
			_, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String(strings.Repeat("k", 257)), Data: []byte("x")})
			return err
		}, is[*types.ValidationException]},
		{"an empty key", func() error {
			_, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String(""), Data: []byte("x")})
			return err
		}, is[*types.ValidationException]},
		// Over the stream's limit (1 MiB, data plus key) is a check of the
		// stream; over 10 MiB breaks the request's shape.
		{"data over the stream's 1 MiB", func() error {
			_, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String("k"), Data: make([]byte, 1<<20)})
			return err
		}, is[*types.InvalidArgumentException]},
		{"data over 10 MiB", func() error {
			_, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String("k"), Data: make([]byte, 10<<20+1)})
			return err
		}, is[*types.ValidationException]},
		{"a bad ExplicitHashKey", func() error {
			_, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String("k"), Data: []byte("x"), ExplicitHashKey: aws.String("340282366920938463463374607431768211456")})
			return err
		}, is[*types.InvalidArgumentException]},
		{"GetRecords Limit 10001", func() error {
			it := iter(t, s, "v", shard0, types.ShardIteratorTypeLatest)
			_, err := s.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: &it, Limit: aws.Int32(10001)})
			return err
		}, is[*types.InvalidArgumentException]},
		{"a stream name with a slash", func() error {
			_, err := s.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("a/b"), ShardCount: aws.Int32(1)})
			return err
		}, is[*types.ValidationException]},
		{"more shards than the limit", func() error {
			_, err := s.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("big"), ShardCount: aws.Int32(9)})
			return err
		}, is[*types.LimitExceededException]},
		{"a split past the limit", func() error {
			mustStream(t, s, "full", 8)
			_, err := s.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("full"), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("100")})
			return err
		}, is[*types.LimitExceededException]},
		{"a canceled context", func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := s.PutRecord(c, &kinesis.PutRecordInput{StreamName: aws.String("v"), PartitionKey: aws.String("k"), Data: []byte("x")})
			return err
		}, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, c := range cases {
		if err := c.call(); !c.want(err) {
			t.Errorf("%s: got %v", c.name, err)
		}
	}
	if recs, _ := s.Records("v"); len(recs) != 0 {
		t.Fatalf("rejected requests stored %d records", len(recs))
	}
}

func is[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

func TestListShardsFilters(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now))
	mustStream(t, s, "lf", 2)
	beforeSplit := clk.Now()
	clk.Advance(time.Minute)
	if _, err := s.SplitShard(testCtx(t), &kinesis.SplitShardInput{StreamName: aws.String("lf"), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("12345")}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	ts := func(t time.Time) *time.Time { return &t }
	cases := []struct {
		filter types.ShardFilter
		want   string
	}{
		{types.ShardFilter{Type: types.ShardFilterTypeAtLatest}, "[shardId-000000000001 shardId-000000000002 shardId-000000000003]"},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTrimHorizon}, "[shardId-000000000000 shardId-000000000001]"},
		{types.ShardFilter{Type: types.ShardFilterTypeFromTrimHorizon}, "[shardId-000000000000 shardId-000000000001 shardId-000000000002 shardId-000000000003]"},
		{types.ShardFilter{Type: types.ShardFilterTypeAfterShardId, ShardId: aws.String("shardId-000000000001")}, "[shardId-000000000002 shardId-000000000003]"},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: ts(beforeSplit)}, "[shardId-000000000000 shardId-000000000001]"},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: ts(clk.Now())}, "[shardId-000000000001 shardId-000000000002 shardId-000000000003]"},
		{types.ShardFilter{Type: types.ShardFilterTypeFromTimestamp, Timestamp: ts(beforeSplit)}, "[shardId-000000000000 shardId-000000000001 shardId-000000000002 shardId-000000000003]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(listShards(t, s, "lf", &c.filter)); got != c.want {
			t.Errorf("ShardFilter %s: %s, want %s", c.filter.Type, got, c.want)
		}
	}

	// NextToken carries the filter, and expires like the service's.
	out, err := s.ListShards(testCtx(t), &kinesis.ListShardsInput{StreamName: aws.String("lf"), MaxResults: aws.Int32(1), ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}})
	if err != nil || len(out.Shards) != 1 || *out.Shards[0].ShardId != "shardId-000000000001" {
		t.Fatalf("first AT_LATEST page: %v %v", out, err)
	}
	next, err := s.ListShards(testCtx(t), &kinesis.ListShardsInput{NextToken: out.NextToken})
	if err != nil || len(next.Shards) != 2 || next.NextToken != nil {
		t.Fatalf("second page: %v %v; want the two remaining open shards", next, err)
	}
	clk.Advance(5*time.Minute + time.Second)
	_, err = s.ListShards(testCtx(t), &kinesis.ListShardsInput{NextToken: out.NextToken})
	wantAs[*types.ExpiredNextTokenException](t, "ListShards with a stale NextToken", err)
}

func TestRecordsArePrivateCopies(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "cp", 1)
	buf := []byte("original")
	if _, err := s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("cp"), Records: []types.PutRecordsRequestEntry{{PartitionKey: aws.String("k"), Data: buf}}}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX") // the caller reuses its buffer
	it := iter(t, s, "cp", shard0, types.ShardIteratorTypeTrimHorizon)
	first := get(t, testCtx(t), s, it)
	first.Records[0].Data[0] = 'Y' // a consumer scribbles on its answer
	if got := data(get(t, testCtx(t), s, it).Records); got[0] != "original" {
		t.Fatalf("stored data changed to %q", got[0])
	}
}

func TestMillisBehindLatest(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now))
	mustStream(t, s, "mb", 1)
	for i := range 3 {
		put(t, s, "mb", "k", fmt.Sprint(i))
	}
	clk.Advance(10 * time.Second)
	it := iter(t, s, "mb", shard0, types.ShardIteratorTypeTrimHorizon)
	out, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it, Limit: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	if ms := aws.ToInt64(out.MillisBehindLatest); ms != 10000 {
		t.Fatalf("one of three 10-second-old records read: %d ms behind, want 10000", ms)
	}
	if ms := aws.ToInt64(get(t, testCtx(t), s, *out.NextShardIterator).MillisBehindLatest); ms != 0 {
		t.Fatalf("caught up: %d ms behind, want 0", ms)
	}
}

// Publishers keep publishing while the stream is split and merged under
// them; every record is stored exactly once, and reading the shards in
// lineage order (parents first) gives each key's records in publish order.
func TestPublishDuringResharding(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "rs", 2)
	const writers, each = 4, 300
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	progress := make(chan struct{}, writers*each/100) // one tick per 100 records
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if i%100 == 99 {
					progress <- struct{}{}
				}
				_, err := s.PutRecord(context.Background(), &kinesis.PutRecordInput{
					StreamName: aws.String("rs"), PartitionKey: aws.String(fmt.Sprintf("key-%d", w)), Data: fmt.Appendf(nil, "%d", i)})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	ctx := testCtx(t)
	mid := "170141183460469231731687303715884105728" // 2^127, the boundary of the two shards
	steps := []func() error{
		func() error {
			_, err := s.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("rs"), ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("85070591730234615865843651857942052864")})
			return err
		},
		func() error {
			_, err := s.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String("rs"), ShardToMerge: aws.String("shardId-000000000003"), AdjacentShardToMerge: aws.String("shardId-000000000001")})
			return err
		},
		func() error {
			_, err := s.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("rs"), ShardToSplit: aws.String("shardId-000000000004"), NewStartingHashKey: aws.String(mid)})
			return err
		},
	}
	for _, step := range steps {
		<-progress // reshard while the writers are mid-way
		<-progress
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs, err := s.Records("rs") // shard-index order: parents before children
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for _, r := range recs {
		k := *r.PartitionKey
		if string(r.Data) != fmt.Sprint(next[k]) {
			t.Fatalf("key %s: record %q in shard %s, want %d", k, r.Data, r.ShardID, next[k])
		}
		next[k]++
	}
	for w := range writers {
		if n := next[fmt.Sprintf("key-%d", w)]; n != each {
			t.Fatalf("key-%d: %d records stored, want %d", w, n, each)
		}
	}
}

// Records of one answer share a buffer; growing one must not overwrite the
// next.
func TestGetRecordsDataIsolation(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "iso", 1)
	entries := []types.PutRecordsRequestEntry{
		{PartitionKey: aws.String("a"), Data: []byte("first")},
		{PartitionKey: aws.String("b"), Data: []byte("second")},
	}
	if _, err := s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("iso"), Records: entries}); err != nil {
		t.Fatal(err)
	}
	out := get(t, testCtx(t), s, iter(t, s, "iso", shard0, types.ShardIteratorTypeTrimHorizon))
	_ = append(out.Records[0].Data, "!!!"...)
	if !bytes.Equal(out.Records[1].Data, []byte("second")) {
		t.Fatalf("appending to record 0 changed record 1 to %q", out.Records[1].Data)
	}
}

// A shard longer than its storage chunks reads, trims and seeks correctly
// across chunk boundaries.
func TestLongShard(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithRetention(time.Hour), kinesistest.WithIteratorTTL(24*time.Hour))
	mustStream(t, s, "long", 1)
	const total = 5000
	var seqs []string
	for i := 0; i < total; i += 500 {
		entries := make([]types.PutRecordsRequestEntry, 500)
		for j := range entries {
			entries[j] = types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: fmt.Appendf(nil, "%d", i+j)}
		}
		out, err := s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("long"), Records: entries})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Records {
			seqs = append(seqs, *r.SequenceNumber)
		}
		clk.Advance(time.Minute) // batch b arrived b minutes ago, give or take
	}
	readAll := func(it string, limit int32) []string {
		var got []string
		for {
			out, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it, Limit: &limit})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Records) > int(limit) {
				t.Fatalf("Limit %d returned %d", limit, len(out.Records))
			}
			if len(out.Records) == 0 {
				return got
			}
			got = append(got, data(out.Records)...)
			it = *out.NextShardIterator
		}
	}
	check := func(what string, got []string, from int) {
		t.Helper()
		if len(got) != total-from {
			t.Fatalf("%s: %d records, want %d", what, len(got), total-from)
		}
		for i, d := range got {
			if d != fmt.Sprint(from+i) {
				t.Fatalf("%s: record %d is %s, want %d", what, i, d, from+i)
			}
		}
	}
	check("Limit 700", readAll(iter(t, s, "long", shard0, types.ShardIteratorTypeTrimHorizon), 700), 0)
	check("Limit 10000", readAll(iter(t, s, "long", shard0, types.ShardIteratorTypeTrimHorizon), 10000), 0)
	at, err := s.GetShardIterator(testCtx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String("long"), ShardId: aws.String(shard0),
		ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: &seqs[3333]})
	if err != nil {
		t.Fatal(err)
	}
	check("AT_SEQUENCE_NUMBER 3333", readAll(*at.ShardIterator, 1000), 3333)

	// Now 10 minutes after the first batch: with 55 more minutes, batches
	// 0-4 (records 0-2499) are past the hour and go.
	clk.Advance(55 * time.Minute)
	check("after retention", readAll(iter(t, s, "long", shard0, types.ShardIteratorTypeTrimHorizon), 1000), 2500)
	check("an old position after retention", readAll(*at.ShardIterator, 1000), 3333)
}

func TestThrottling(t *testing.T) {
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithThrottling())
	mustStream(t, s, "th", 1)
	batch := make([]types.PutRecordsRequestEntry, 500)
	for i := range batch {
		batch[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: fmt.Appendf(nil, "%d", i)}
	}
	putBatch := func() *kinesis.PutRecordsOutput {
		out, err := s.PutRecords(testCtx(t), &kinesis.PutRecordsInput{StreamName: aws.String("th"), Records: batch})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	putBatch()
	putBatch()
	out := putBatch() // records 1001-1500 of this second
	if aws.ToInt32(out.FailedRecordCount) != 500 || aws.ToString(out.Records[0].ErrorCode) != "ProvisionedThroughputExceededException" {
		t.Fatalf("third batch in one second: %d failed, first code %q; want all 500 throttled", aws.ToInt32(out.FailedRecordCount), aws.ToString(out.Records[0].ErrorCode))
	}
	_, err := s.PutRecord(testCtx(t), &kinesis.PutRecordInput{StreamName: aws.String("th"), PartitionKey: aws.String("k"), Data: []byte("x")})
	wantAs[*types.ProvisionedThroughputExceededException](t, "PutRecord over the write limit", err)
	clk.Advance(time.Second)
	if out := putBatch(); aws.ToInt32(out.FailedRecordCount) != 0 {
		t.Fatalf("next second: %d failed, want 0", aws.ToInt32(out.FailedRecordCount))
	}
	// Bytes: a maximal record (data plus key 1 MiB) fits alone, not with
	// another.
	big := make([]byte, 1<<20-len("k"))
	clk.Advance(time.Second)
	put(t, s, "th", "k", string(big))
	_, err = s.PutRecord(testCtx(t), &kinesis.PutRecordInput{StreamName: aws.String("th"), PartitionKey: aws.String("k"), Data: []byte("x")})
	wantAs[*types.ProvisionedThroughputExceededException](t, "PutRecord after 1 MiB in the same second", err)

	it := iter(t, s, "th", shard0, types.ShardIteratorTypeLatest)
	for range 5 {
		get(t, testCtx(t), s, it)
	}
	_, err = s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
	wantAs[*types.ProvisionedThroughputExceededException](t, "a sixth GetRecords in one second", err)
	clk.Advance(time.Second)
	get(t, testCtx(t), s, it)
	if recs, _ := s.Records("th"); len(recs) != 1501 {
		t.Fatalf("stored %d records, want 1501 (throttled ones are not stored)", len(recs))
	}
}

func TestSplitInHalf(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "half", 1)
	if err := s.SplitInHalf("half", shard0); err != nil {
		t.Fatal(err)
	}
	out, err := s.ListShards(testCtx(t), &kinesis.ListShardsInput{StreamName: aws.String("half")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Shards) != 3 {
		t.Fatalf("%d shards after SplitInHalf, want 3", len(out.Shards))
	}
	lo, hi := out.Shards[1].HashKeyRange, out.Shards[2].HashKeyRange
	const want = "[0 170141183460469231731687303715884105727] [170141183460469231731687303715884105728 340282366920938463463374607431768211455]"
	if got := fmt.Sprintf("[%s %s] [%s %s]", *lo.StartingHashKey, *lo.EndingHashKey, *hi.StartingHashKey, *hi.EndingHashKey); got != want {
		t.Fatalf("children %s, want %s", got, want)
	}
	wantAs[*types.InvalidArgumentException](t, "SplitInHalf of a closed shard", s.SplitInHalf("half", shard0))
	wantAs[*types.ResourceNotFoundException](t, "SplitInHalf of a missing shard", s.SplitInHalf("half", "shardId-000000000077"))
}

// An iterator of a deleted stream does not read a new stream of the same
// name.
func TestIteratorOfRecreatedStream(t *testing.T) {
	s := kinesistest.New()
	mustStream(t, s, "again", 1)
	put(t, s, "again", "k", "old")
	it := iter(t, s, "again", shard0, types.ShardIteratorTypeTrimHorizon)
	if _, err := s.DeleteStream(testCtx(t), &kinesis.DeleteStreamInput{StreamName: aws.String("again")}); err != nil {
		t.Fatal(err)
	}
	mustStream(t, s, "again", 1)
	put(t, s, "again", "k", "new")
	_, err := s.GetRecords(testCtx(t), &kinesis.GetRecordsInput{ShardIterator: &it})
	wantAs[*types.ResourceNotFoundException](t, "GetRecords with an iterator of the deleted stream", err)
	if got := data(get(t, testCtx(t), s, iter(t, s, "again", shard0, types.ShardIteratorTypeTrimHorizon)).Records); len(got) != 1 || got[0] != "new" {
		t.Fatalf("the new stream holds %v, want [new]", got)
	}
}
