package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// createAutoStream creates an on-demand stream (4 shards in process) whose
// record distribution strategy is AUTO.
func createAutoStream(ctx context.Context, t *testing.T, api *kinesistest.Server, base string) string {
	t.Helper()
	name := uniqueName(base)
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{
		StreamName:                 aws.String(name),
		StreamModeDetails:          &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand},
		RecordDistributionStrategy: types.RecordDistributionStrategyAuto,
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

// Issue 31, item 3: on an AUTO stream an aggregating publisher packs
// messages whatever their keys and takes each aggregate as stored where it
// lands. Routing by key there, an aggregate lands on a shard its keys do
// not hash to and is sent again, over and over: every message stored
// several times.
func TestAggregatedPublishOnAutoStream(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createAutoStream(ctx, t, s, "auto-agg-")
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})
	keys := aggKeys(40)
	const perKey = 30
	publishKeyed(ctx, t, keyedPublisher{p}, keys, 0, perKey)

	msgs, records := readMessages(ctx, t, s, stream)
	got := map[string][]int{}
	for _, m := range msgs {
		if m.key != m.Key {
			t.Errorf("message %s/%d read under key %q", m.Key, m.N, m.key)
		}
		got[m.Key] = append(got[m.Key], m.N)
	}
	for _, k := range keys {
		ns := got[k]
		slices.Sort(ns)
		if !slices.Equal(ns, seq(perKey)) {
			t.Errorf("key %s stored %d times: %v; want 0..%d once each", k, len(ns), ns, perKey-1)
			break
		}
	}
	if total := len(keys) * perKey; len(msgs) != total || records*4 > total {
		t.Errorf("%d messages in %d Kinesis records; want %d messages, aggregated", len(msgs), records, total)
	}
	if n := s.Calls(kinesistest.OpDescribeStreamSummary); n == 0 {
		t.Error("the publisher never read the stream's distribution strategy")
	}
}

// Issue 31, item 3: a by_key subscriber refuses an AUTO stream (the
// service keeps no key's records on one shard, so no order per key can be
// kept) with ErrInvalid; without by_key it reads every message an
// aggregating publisher put there, whatever shard each aggregate landed on.
func TestSubscribeAutoStream(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	stream := createAutoStream(ctx, t, s, "auto-sub-")
	e := newEnvWith(t, s)

	bk := e.broker()
	_, err := subscribe(e, bk, stream, func(context.Context, aggMsg, runtime.Delivery) runtime.Outcome { return runtime.Ack() }, runtime.ByKey())
	if err == nil {
		err = bk.Connect(ctx)
		_ = bk.Shutdown(context.Background())
	}
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("by_key subscriber on an AUTO stream: %v; want ErrInvalid", err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	b := e.broker()
	mustSubscribe(e, b, stream, func(_ context.Context, m aggMsg, _ runtime.Delivery) runtime.Outcome {
		mu.Lock()
		seen[fmt.Sprintf("%s/%d", m.Key, m.N)]++
		mu.Unlock()
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b)

	pb := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](pb, runtime.PublisherSpec{Stream: stream, Aggregate: true})
	keys := aggKeys(20)
	const perKey = 20
	publishKeyed(ctx, t, keyedPublisher{p}, keys, 0, perKey)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == len(keys)*perKey {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages", n, len(keys)*perKey)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", k, n)
		}
	}
}

// Issue 31, item 3: an aggregating publisher notices a switch to AUTO
// while it publishes (within its read period) and from then on takes each
// aggregate as stored wherever it lands: every message is stored once,
// none sent again and again.
func TestAggregatedPublishAcrossSwitchToAuto(t *testing.T) {
	runtime.SetAggDistributionEvery(t, 100*time.Millisecond)
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	name := uniqueName("switch-")
	if err := s.AddOnDemandStream(name); err != nil {
		t.Fatal(err)
	}
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: name, Aggregate: true})
	keys := aggKeys(20)
	publishKeyed(ctx, t, keyedPublisher{p}, keys, 0, 5)
	sum, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateStreamRecordDistributionStrategy(ctx, &kinesis.UpdateStreamRecordDistributionStrategyInput{
		StreamARN: sum.StreamDescriptionSummary.StreamARN, RecordDistributionStrategy: types.RecordDistributionStrategyAuto,
	}); err != nil {
		t.Fatal(err)
	}
	for n := 5; n < 30; n += 5 {
		publishKeyed(ctx, t, keyedPublisher{p}, keys, n, n+5)
		time.Sleep(50 * time.Millisecond)
	}
	msgs, _ := readMessages(ctx, t, s, name)
	got := map[string][]int{}
	for _, m := range msgs {
		got[m.Key] = append(got[m.Key], m.N)
	}
	for _, k := range keys {
		ns := got[k]
		slices.Sort(ns)
		if !slices.Equal(ns, seq(30)) {
			t.Fatalf("key %s stored as %v; want 0..29 once each", k, ns)
		}
	}
}
