package shard_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// onDemandEnv is memEnv with an on-demand stream (4 shards), AUTO when
// auto is set.
func onDemandEnv(t *testing.T, auto bool) (*env, *kinesistest.Server) {
	srv := kinesistest.New()
	e := &env{t: t, client: srv, store: lease.NewMemory(), stream: fmt.Sprintf("dist-%d", streamSeq.Add(1))}
	in := &kinesis.CreateStreamInput{StreamName: aws.String(e.stream), StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}}
	if auto {
		in.RecordDistributionStrategy = types.RecordDistributionStrategyAuto
	}
	if _, err := srv.CreateStream(e.ctx(5*time.Second), in); err != nil {
		t.Fatal(err)
	}
	return e, srv
}

// putAggregates puts n KPL aggregates of 8 sub-records each (keys k0..k7,
// data "<tag><i>.<j>") and then one plain record "<tag>end" per open shard,
// and returns the sub-records' data in order of publishing.
func putAggregates(t *testing.T, e *env, tag string, n int) []string {
	t.Helper()
	var want []string
	for i := range n {
		var subs []kpl.Record
		for j := range 8 {
			d := fmt.Sprintf("%s%d.%d", tag, i, j)
			subs = append(subs, kpl.Record{PartitionKey: fmt.Sprintf("k%d", j), Data: []byte(d)})
			want = append(want, d)
		}
		if _, err := e.client.PutRecord(e.ctx(5*time.Second), &kinesis.PutRecordInput{
			StreamName: aws.String(e.stream), PartitionKey: aws.String("agg"), Data: kpl.Aggregate(subs),
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range e.shards() {
		// Plain records, never filtered: on AUTO one lands on each shard in
		// turn, after the aggregates there.
		if _, err := e.client.PutRecord(e.ctx(5*time.Second), &kinesis.PutRecordInput{
			StreamName: aws.String(e.stream), PartitionKey: aws.String(tag + "end-" + id), Data: []byte(tag + "end"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// delivered waits until col has ends records "<tag>end" and returns the
// data of the other records with tag's prefix, sorted.
func delivered(t *testing.T, col *collector, tag string, ends int) []string {
	t.Helper()
	recs := col.wait(t, 20*time.Second, tag+"end on every shard", func(rs []*shard.Record) bool {
		n := 0
		for _, r := range rs {
			if string(r.Data) == tag+"end" {
				n++
			}
		}
		return n >= ends
	})
	var got []string
	for _, r := range recs {
		if d := string(r.Data); len(d) > len(tag) && d[:len(tag)] == tag && d != tag+"end" {
			got = append(got, d)
		}
	}
	slices.Sort(got)
	return slices.Compact(got)
}

// Issue 31, item 3: on an AUTO stream the service puts an aggregate on any
// shard, whatever its sub-records' keys; the reader delivers every
// sub-record instead of dropping those whose key hashes elsewhere.
func TestKPLSubRecordsOnAutoStreamAreAllDelivered(t *testing.T) {
	e, _ := onDemandEnv(t, true)
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg)
	want := putAggregates(t, e, "a", 8)
	got := delivered(t, col, "a", len(e.shards()))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d of %d sub-records on an AUTO stream; missing %v", len(got), len(want), missing(want, got))
	}
}

// setAuto switches e's stream to AUTO, or back to USER_PARTITION_KEY.
func setAuto(t *testing.T, e *env, srv *kinesistest.Server, auto bool) {
	t.Helper()
	sum, err := srv.DescribeStreamSummary(e.ctx(5*time.Second), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(e.stream)})
	if err != nil {
		t.Fatal(err)
	}
	strategy := types.RecordDistributionStrategyUserPartitionKey
	if auto {
		strategy = types.RecordDistributionStrategyAuto
	}
	if _, err := srv.UpdateStreamRecordDistributionStrategy(e.ctx(5*time.Second), &kinesis.UpdateStreamRecordDistributionStrategyInput{
		StreamARN: sum.StreamDescriptionSummary.StreamARN, RecordDistributionStrategy: strategy,
	}); err != nil {
		t.Fatal(err)
	}
}

func missing(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// Issue 31, item 3: a switch of strategy while running is noticed at the
// next shard listing (within one Sync): after USER_PARTITION_KEY → AUTO
// nothing is filtered; after AUTO → USER_PARTITION_KEY the records of the
// AUTO period are still delivered whole, to a coordinator that saw the
// switch and to one started after it, while aggregates placed by key
// afterwards are filtered again (KCL behaviour).
func TestDistributionSwitchWhileRunning(t *testing.T) {
	e, srv := onDemandEnv(t, false)
	col := newCollector()
	var seen []bool
	seenCh := make(chan bool, 4)
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	cfg.OnDistribution = func(auto bool) { seenCh <- auto }
	c := e.start(cfg)
	waitSeen := func(want bool) {
		t.Helper()
		select {
		case got := <-seenCh:
			seen = append(seen, got)
			if got != want || c.AutoDistribution() != want {
				t.Fatalf("OnDistribution(%v), AutoDistribution %v; want %v", got, c.AutoDistribution(), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("switch to auto=%v not noticed (seen %v)", want, seen)
		}
	}
	waitSeen(false)

	setAuto(t, e, srv, true)
	waitSeen(true)
	wantA := putAggregates(t, e, "a", 8)
	slices.Sort(wantA)
	if got := delivered(t, col, "a", 4); !slices.Equal(got, wantA) {
		t.Fatalf("after the switch to AUTO: missing %v", missing(wantA, got))
	}

	setAuto(t, e, srv, false)
	waitSeen(false)
	// The filter resumes for records that arrive after the switch was seen,
	// less clock skew (a second in process).
	time.Sleep(1500 * time.Millisecond)
	// Key-placed again: an aggregate put by its own key lands on one shard
	// and its sub-records hashing elsewhere are filtered, as before issue 31.
	putAggregates(t, e, "b", 1)
	got := delivered(t, col, "b", 4)
	if len(got) == 0 || len(got) == 8 {
		t.Fatalf("after the switch back: %d of 8 sub-records of a key-placed aggregate delivered; want the filter to drop those hashing elsewhere", len(got))
	}

	// A coordinator started now reads the AUTO period's records whole.
	col2 := newCollector()
	cfg2 := e.config("b", col2.sink)
	cfg2.Namespace += "-fresh"
	cfg2.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg2)
	if got := delivered(t, col2, "a", 4); !slices.Equal(got, wantA) {
		t.Fatalf("a fresh reader after the switch back: missing %v", missing(wantA, got))
	}
}
