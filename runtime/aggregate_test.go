package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

type aggMsg struct {
	Key string `json:"key"`
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
}

// storedMsg is one user record as a consumer that deaggregates reads it.
type storedMsg struct {
	aggMsg
	key, shard, seq string
	sub             int64
	aggregated      bool
	inRange         bool // every key of its aggregate hashes into the shard it was read from
}

// readMessages reads every shard of stream (parents before children, as
// ListShards sorts them) from the horizon and deaggregates what it reads.
// It returns the messages and the number of Kinesis records.
func readMessages(ctx context.Context, t *testing.T, api kinesisapi.API, stream string) ([]storedMsg, int) {
	t.Helper()
	l, err := shard.List(ctx, api, stream)
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	var out []storedMsg
	records := 0
	for _, id := range l.IDs() {
		info, _ := l.Shard(id)
		it, err := api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: &stream, ShardId: &id, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatalf("GetShardIterator: %v", err)
		}
		for iter := it.ShardIterator; iter != nil; {
			res, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatalf("GetRecords: %v", err)
			}
			for _, r := range res.Records {
				records++
				subs, ok, err := kpl.Deaggregate(r.Data)
				if err != nil {
					t.Fatalf("record %s on %s: %v", aws.ToString(r.SequenceNumber), id, err)
				}
				if !ok {
					subs = []kpl.Record{{PartitionKey: aws.ToString(r.PartitionKey), Data: r.Data}}
				}
				// The strictest reader drops a whole aggregate that holds a
				// record whose key does not hash into the shard it was
				// read from.
				inRange := true
				for _, s := range subs {
					inRange = inRange && info.Range.Contains(shard.HashKeyOf(s.PartitionKey))
				}
				for _, s := range subs {
					_, payload, err := runtime.DecodeRecord(s.Data)
					if err != nil {
						t.Fatalf("decode: %v", err)
					}
					m := storedMsg{key: s.PartitionKey, shard: id, seq: aws.ToString(r.SequenceNumber), sub: s.SubSequence, aggregated: ok}
					if err := json.Unmarshal(payload, &m.aggMsg); err != nil {
						t.Fatalf("payload %q: %v", payload, err)
					}
					m.inRange = inRange
					out = append(out, m)
				}
			}
			if len(res.Records) == 0 {
				break
			}
			iter = res.NextShardIterator
		}
	}
	return out, records
}

// checkKeyed checks what the strictest reader sees: only the aggregates
// whose every key hashes to the shard they were read from (it drops the
// others), each key's messages 0..n-1 exactly once and in order, each under
// its own key. It returns how many messages were in dropped aggregates.
func checkKeyed(t *testing.T, msgs []storedMsg, want map[string]int) (misplaced int) {
	t.Helper()
	got := map[string][]int{}
	for _, m := range msgs {
		if m.key != m.Key {
			t.Errorf("message %s/%d read under key %q", m.Key, m.N, m.key)
		}
		if !m.inRange {
			misplaced++
			continue
		}
		got[m.Key] = append(got[m.Key], m.N)
	}
	for k, n := range want {
		if !slices.Equal(got[k], seq(n)) {
			t.Errorf("key %s read %v, want 0..%d once each, in order", k, got[k], n-1)
		}
	}
	if len(got) != len(want) {
		t.Errorf("read %d keys, want %d", len(got), len(want))
	}
	return misplaced
}

// eachKey wants n messages of each of keys (checkKeyed).
func eachKey(keys []string, n int) map[string]int {
	want := make(map[string]int, len(keys))
	for _, k := range keys {
		want[k] = n
	}
	return want
}

func aggKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%03d", i)
	}
	return keys
}

// publishKeyed publishes messages from..to-1 of each key, one goroutine
// per key publishing its messages one after another. A p with a finish
// method (gatedPublisher) hears when each goroutine is done.
func publishKeyed(ctx context.Context, t *testing.T, p runtime.Publisher[aggMsg], keys []string, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			if f, ok := p.(interface{ finish() }); ok {
				defer f.finish()
			}
			for n := from; n < to; n++ {
				if err := p.Publish(ctx, aggMsg{Key: k, N: n}); err != nil {
					t.Errorf("publish %s/%d: %v", k, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// keyedPublisher keys each message by its Key field, as a header contract
// would, through the message's own PartitionKey step.
type keyedPublisher struct{ p runtime.Publisher[aggMsg] }

func (k keyedPublisher) Publish(ctx context.Context, m aggMsg) error {
	return k.p.Message(m).PartitionKey(m.Key).Publish(ctx)
}
func (k keyedPublisher) Message(m aggMsg) *runtime.Message[aggMsg] { return k.p.Message(m) }

// TestAggregatedPublishInProcess: the in-process service answers a put in
// microseconds, so what shares an aggregate there depends on how the
// scheduler runs the callers beside the one put in flight. Once the woken
// callers come back slower than the refill wait (aggRefill, 2 ms) the
// aggregates shrink and stay small (the refill waits only for as many as
// the last one held): under CI load they held ~3 messages (858 records
// for 2,901). Its puts are held (putGate) until every caller still
// publishing has its next message out, as a round trip of the real
// service holds them: what queues while a shard's aggregate is in flight
// goes in the next one (up to InFlightWait), so each key's message is in
// one of any two of its shard's aggregates in a row: at most about
// 2 × 60 × 4 records for the keyed 2,400, whatever the scheduler does.
func TestAggregatedPublishInProcess(t *testing.T) {
	s := kinesistest.New()
	g := &putGate{API: s}
	testAggregatedPublish(t, s, g, runtime.WithKinesisClient(g))
}

// putGate holds each PutRecords until every caller that is still
// publishing (publishing, from start) is inside Publish (inside, from
// enter and leave): a put in flight then has every other caller's message
// queued behind it, whatever the scheduler does. A put waits at most
// putGateWait, so a gate that never opens slows the test down rather than
// hangs it.
type putGate struct {
	kinesisapi.API
	mu                 sync.Mutex
	publishing, inside int
	changed            chan struct{} // closed and replaced at each change
}

const putGateWait = 5 * time.Second

func (g *putGate) update(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

func (g *putGate) start(n int) { g.update(func() { g.publishing += n }) }
func (g *putGate) finish()     { g.update(func() { g.publishing-- }) }
func (g *putGate) enter()      { g.update(func() { g.inside++ }) }
func (g *putGate) leave()      { g.update(func() { g.inside-- }) }

func (g *putGate) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	timeout := time.NewTimer(putGateWait)
	defer timeout.Stop()
	for {
		g.mu.Lock()
		if g.inside >= g.publishing {
			g.mu.Unlock()
			break
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
			continue
		case <-timeout.C:
		case <-ctx.Done():
		}
		break // waited long enough: put anyway
	}
	return g.API.PutRecords(ctx, in, optFns...)
}

// gatedPublisher counts its callers in and out of Publish on g.
type gatedPublisher struct {
	runtime.Publisher[aggMsg]
	g *putGate
}

func (p gatedPublisher) finish() { p.g.finish() }

func (p gatedPublisher) Publish(ctx context.Context, m aggMsg) error {
	p.g.enter()
	defer p.g.leave()
	return p.Publisher.Publish(ctx, m)
}

// TestAggregatedPublishKinesalite is the same over HTTP to kinesalite:
// the ExplicitHashKey of each aggregate puts it on the shard its keys map to.
func TestAggregatedPublishKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedPublish(t, api, nil, opts...)
}

// testAggregatedPublish publishes 40 keys × 60 messages from four
// goroutines through an aggregating publisher and reads them back the way
// a KCL does: far fewer Kinesis records than messages, every message on the
// shard its own key hashes to, under its own key, each key in order; and a
// Send's receipt names where its message is. With g, the keyed callers
// are counted on g (putGate).
func testAggregatedPublish(t *testing.T, api kinesisapi.API, g *putGate, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 4)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})

	keys := aggKeys(40)
	const perKey = 60
	// The key comes from each message's PartitionKey step, one goroutine
	// per key; then PublishAll under a mount-site key.
	var keyed runtime.Publisher[aggMsg] = keyedPublisher{p}
	if g != nil {
		keyed = gatedPublisher{keyed, g}
		g.start(len(keys))
	}
	publishKeyed(ctx, t, keyed, keys, 0, perKey)
	// A mount-site key: PublishAll of many messages of one key.
	one := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "bulk", Aggregate: true})
	bulk := make([]aggMsg, 500)
	for i := range bulk {
		bulk[i] = aggMsg{Key: "bulk", N: i}
	}
	if err := runtime.PublishAll(ctx, one, bulk); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	receipt, err := p.Message(aggMsg{Key: "last", N: 0}).PartitionKey("last").Send(ctx)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}

	msgs, records := readMessages(ctx, t, api, stream)
	want := map[string]int{"bulk": len(bulk), "last": 1}
	for _, k := range keys {
		want[k] = perKey
	}
	if n := checkKeyed(t, msgs, want); n != 0 {
		t.Errorf("%d messages read on a shard their key does not hash to", n)
	}
	total := len(keys)*perKey + len(bulk) + 1
	if len(msgs) != total {
		t.Errorf("read %d messages, want %d", len(msgs), total)
	}
	t.Logf("%d messages in %d Kinesis records", total, records)
	if records*4 > total {
		t.Errorf("%d Kinesis records for %d messages: not aggregated", records, total)
	}
	for _, m := range msgs {
		if m.Key == "last" && (m.shard != receipt.ShardID || m.seq != receipt.SequenceNumber || m.sub != receipt.SubSequence || receipt.PartitionKey != "last") {
			t.Errorf("message stored at %s/%s/%d, receipt says %+v", m.shard, m.seq, m.sub, receipt)
		}
	}
}

// TestAggregatedPublishAcrossReshard splits every shard under an
// aggregating publisher whose shard map is then stale: aggregates land on
// a child that holds only part of their keys. The publisher sees it, lists
// the shards again and sends those messages again to their keys' shards,
// before any later message of their keys. A consumer that drops aggregates holding keys of other shards
// reads every message once and every key in order.
func TestAggregatedPublishAcrossReshard(t *testing.T) {
	s := kinesistest.New()
	testAggregatedReshard(t, s, runtime.WithKinesisClient(s))
}

// TestAggregatedPublishAcrossReshardKinesalite is the same on kinesalite.
func TestAggregatedPublishAcrossReshardKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedReshard(t, api, opts...)
}

// TestAggregatedPublishAcrossReshardKinesisMock is the same on kinesis-mock,
// which behaves more like the service around resharding.
func TestAggregatedPublishAcrossReshardKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	api, opts := liveClient(url)
	testAggregatedReshard(t, api, opts...)
}

// TestAggregatedPublishKinesisMock is the round trip on kinesis-mock.
func TestAggregatedPublishKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	api, opts := liveClient(url)
	testAggregatedPublish(t, api, nil, opts...)
}

// liveClient is an SDK client of a local server and the broker options
// that reach it.
func liveClient(url string) (kinesisapi.API, []runtime.Option) {
	client := kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
	return client, []runtime.Option{runtime.WithEndpoint(url), runtime.WithRegion("us-east-1"), runtime.WithTestCredentials()}
}

// splitInHalf splits shard id of stream at the middle of its range through
// the API and waits for the stream to be active again.
func splitInHalf(ctx context.Context, t *testing.T, api kinesisapi.API, stream, id string) {
	t.Helper()
	l, err := shard.List(ctx, api, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := l.Shard(id)
	start, _ := new(big.Int).SetString(info.StartingHashKey, 10)
	end, _ := new(big.Int).SetString(info.EndingHashKey, 10)
	mid := new(big.Int).Add(start, end)
	mid.Rsh(mid, 1).Add(mid, big.NewInt(1))
	if _, err := api.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: &stream, ShardToSplit: &id, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("split %s: %v", id, err)
	}
	waitActive(ctx, t, api, stream, " after a split")
}

func testAggregatedReshard(t *testing.T, s kinesisapi.API, opts ...runtime.Option) {
	// A server that takes seconds to split (kinesis-mock) would leave the
	// publisher idle long enough to list the shards before routing: the
	// map must stay stale for the misplaced aggregates this test is about.
	runtime.TrustAggregateMaps(t, time.Minute)
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{Linger: 5 * time.Millisecond}))}

	keys := aggKeys(32)
	publishKeyed(ctx, t, p, keys, 0, 20) // the publisher lists the two shards
	for _, id := range []string{"shardId-000000000000", "shardId-000000000001"} {
		splitInHalf(ctx, t, s, stream, id)
	}
	// The first aggregate of each parent after the split holds keys of
	// both its children (16 keys publish at once and linger together).
	publishKeyed(ctx, t, p, keys, 20, 80)

	msgs, _ := readMessages(ctx, t, s, stream)
	want := eachKey(keys, 80)
	misplaced := checkKeyed(t, msgs, want)
	// A reader that skips only the sub-records outside the shard (this
	// runtime's) reads some messages twice, never one out of order.
	l, err := shard.List(ctx, s, stream)
	if err != nil {
		t.Fatal(err)
	}
	firsts := map[string][]int{}
	for _, m := range msgs {
		if info, _ := l.Shard(m.shard); !info.Range.Contains(shard.HashKeyOf(m.key)) {
			continue
		}
		f := firsts[m.Key]
		if len(f) > 0 && m.N < f[len(f)-1] {
			t.Errorf("key %s: message %d read after %d", m.Key, m.N, f[len(f)-1])
		}
		if len(f) == 0 || m.N != f[len(f)-1] {
			firsts[m.Key] = append(f, m.N)
		}
	}
	for _, k := range keys {
		if !slices.Equal(firsts[k], seq(80)) {
			t.Errorf("key %s: a per-record filter reads %v, want 0..79", k, firsts[k])
		}
	}
	t.Logf("%d messages, %d read on a shard their key does not hash to (sent again)", len(msgs), misplaced)
	if misplaced == 0 {
		t.Errorf("no aggregate landed on a shard it was not sent to: the reshard was not exercised")
	}
	// After the reshard, every aggregate goes to a child.
	for _, m := range msgs {
		if m.N >= 60 && (m.shard == "shardId-000000000000" || m.shard == "shardId-000000000001") {
			t.Fatalf("message %s/%d on closed parent %s", m.Key, m.N, m.shard)
		}
	}
}

// TestAggregatedOversize: a message too large to share an aggregate is sent
// plain, under its own key, in its place in its key's order; a message over
// the record limit is an ErrPublish error before any call.
func TestAggregatedOversize(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k"},
		runtime.WithAggregation(runtime.Aggregation{MaxBytes: 2000, Linger: 20 * time.Millisecond}))

	big := strings.Repeat("x", 3000)
	batch := []aggMsg{{Key: "k", N: 0}, {Key: "k", N: 1}, {Key: "k", N: 2, Pad: big}, {Key: "k", N: 3}}
	for n := 4; n < 40; n++ {
		batch = append(batch, aggMsg{Key: "k", N: n, Pad: strings.Repeat("y", 100)})
	}
	if err := runtime.PublishAll(ctx, p, batch); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	msgs, records := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, map[string]int{"k": len(batch)})
	for _, m := range msgs {
		if (m.N == 2) == m.aggregated {
			t.Errorf("message %d: aggregated=%v", m.N, m.aggregated)
		}
	}
	if records < 4 || records > 10 {
		t.Errorf("%d records for 40 messages under a 2000-byte bound", records)
	}
	recs, _ := s.Records(stream)
	for _, r := range recs {
		if n := len(r.Data) + len(aws.ToString(r.PartitionKey)); kpl.IsAggregated(r.Data) && n > 2000 {
			t.Errorf("aggregate of %d bytes over the 2000-byte bound", n)
		}
	}

	calls := s.Calls(kinesistest.OpPutRecords)
	err := p.Publish(ctx, aggMsg{Key: "k", Pad: strings.Repeat("z", runtime.MaxRecordSize)})
	if !errors.Is(err, runtime.ErrPublish) {
		t.Errorf("a message over 1 MiB: %v, want ErrPublish", err)
	}
	if s.Calls(kinesistest.OpPutRecords) != calls {
		t.Errorf("a message over 1 MiB made a call")
	}
}

// TestAggregatedRecordLimit: MaxBytes above the 1 MiB record limit is
// held to it, so messages of 400 KB go two to an aggregate, never three;
// a message of exactly 1 MiB with its key, too large for any aggregate,
// is sent plain and stored.
func TestAggregatedRecordLimit(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k"},
		runtime.WithAggregation(runtime.Aggregation{MaxBytes: 4 << 20, Linger: 50 * time.Millisecond}))
	batch := make([]aggMsg, 6)
	for i := range batch {
		batch[i] = aggMsg{Key: "k", N: i, Pad: strings.Repeat("x", 400_000)}
	}
	// The largest message a record takes: its JSON and key 1 MiB exactly.
	one, _ := json.Marshal(aggMsg{Key: "k", N: 6, Pad: "x"})
	batch = append(batch, aggMsg{Key: "k", N: 6, Pad: strings.Repeat("x", runtime.MaxRecordSize-len("k")-len(one)+1)})
	if err := runtime.PublishAll(ctx, p, batch); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	msgs, records := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, map[string]int{"k": len(batch)})
	// Three aggregates of two when each pair meets in one pass; a pass
	// that a loaded machine cuts short sends one of them alone. Never
	// three to an aggregate: that would pass 1 MiB.
	if records < 4 || records > 7 {
		t.Errorf("%d records for six messages of 400 KB and one of 1 MiB, want three aggregates of two (or fewer) and the large one plain", records)
	}
	recs, _ := s.Records(stream)
	for _, r := range recs {
		sub, ok, err := kpl.Deaggregate(r.Data)
		if err != nil {
			t.Fatalf("stored record: %v", err)
		}
		if n := len(r.Data) + len(aws.ToString(r.PartitionKey)); n > runtime.MaxRecordSize {
			t.Errorf("record of %d bytes over the 1 MiB limit", n)
		}
		if ok && len(sub) > 2 {
			t.Errorf("an aggregate of %d messages of 400 KB, want at most 2", len(sub))
		}
	}
	for _, m := range msgs {
		if (m.N == 6) == m.aggregated {
			t.Errorf("message %d: aggregated=%v", m.N, m.aggregated)
		}
	}
}

// TestAggregatedPublishErrors: a missing stream is an ErrStream error for
// each message; after Shutdown a publish is ErrNotConnected.
func TestAggregatedPublishErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := kinesistest.New()
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: "missing", Aggregate: true})
	err := runtime.PublishAll(ctx, p, []aggMsg{{N: 1}, {N: 2}})
	var re *runtime.Error
	if !errors.Is(err, runtime.ErrStream) || !errors.As(err, &re) || re.Stream != "missing" {
		t.Errorf("publish to a missing stream: %v, want ErrStream naming it", err)
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, aggMsg{}); !errors.Is(err, runtime.ErrNotConnected) {
		t.Errorf("after Shutdown: %v, want ErrNotConnected", err)
	}
}

// TestAggregatedPublishToSubscriber: a subscriber (which skips a KPL
// sub-record read on a shard its key does not hash to, as the KCL does)
// receives every message of an aggregating publisher once, under its own
// key, each key's messages in publish order, with by_key lanes.
func TestAggregatedPublishToSubscriber(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 4)
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	keys := aggKeys(24)
	const perKey = 50
	var mu sync.Mutex
	got := map[string][]int{}
	all := make(chan struct{})
	n := 0
	_, err := runtime.Subscribe(b, stream, func(_ context.Context, m aggMsg, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		defer mu.Unlock()
		if d.PartitionKey != m.Key {
			t.Errorf("message of key %s delivered under %q", m.Key, d.PartitionKey)
		}
		got[m.Key] = append(got[m.Key], m.N)
		if n++; n == len(keys)*perKey {
			close(all)
		}
		return runtime.Ack()
	}, runtime.Workers(8), runtime.ByKey(), runtime.StartAt(runtime.Horizon()))
	if err != nil {
		t.Fatal(err)
	}
	connect(ctx, t, b)
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})}
	publishKeyed(ctx, t, p, keys, 0, perKey)
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("received %d of %d messages", n, len(keys)*perKey)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if !slices.Equal(got[k], seq(perKey)) {
			t.Errorf("key %s received %v, want 0..%d in order", k, got[k], perKey-1)
		}
	}
	recs, _ := s.Records(stream)
	if len(recs)*2 > len(keys)*perKey {
		t.Errorf("%d records for %d messages: not aggregated", len(recs), len(keys)*perKey)
	}
}

// TestPlainAndAggregatedPublishersShareAStream: one stream, a plain and
// an aggregating publisher; each key's messages go through both by turns
// (even through the plain one, odd through the aggregating one, each
// publish awaited), some with a header. A subscriber with by_key lanes
// receives every message once, under its own key, with its header, each
// key's messages in publish order; the stream holds plain records and
// aggregates.
func TestPlainAndAggregatedPublishersShareAStream(t *testing.T) {
	s := kinesistest.New()
	testPlainAndAggregatedShareAStream(t, s, runtime.WithKinesisClient(s))
}

func TestPlainAndAggregatedPublishersShareAStreamKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testPlainAndAggregatedShareAStream(t, api, opts...)
}

func testPlainAndAggregatedShareAStream(t *testing.T, api kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 4)
	b := runtime.NewBroker(opts...)
	keys := aggKeys(16)
	const perKey = 30
	var mu sync.Mutex
	got := map[string][]int{}
	all := make(chan struct{})
	n := 0
	_, err := runtime.Subscribe(b, stream, func(_ context.Context, m aggMsg, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		defer mu.Unlock()
		if d.PartitionKey != m.Key {
			t.Errorf("message %s/%d delivered under %q", m.Key, m.N, d.PartitionKey)
		}
		h, ok := d.Header("n")
		if want := m.N%3 == 0; ok != want || (ok && h != fmt.Sprint(m.N)) {
			t.Errorf("message %s/%d: header n=%q (%v)", m.Key, m.N, h, ok)
		}
		got[m.Key] = append(got[m.Key], m.N)
		if n++; n == len(keys)*perKey {
			close(all)
		}
		return runtime.Ack()
	}, runtime.Workers(8), runtime.ByKey(), runtime.StartAt(runtime.Horizon()), runtime.PollInterval(runtime.MinPollInterval))
	if err != nil {
		t.Fatal(err)
	}
	connect(ctx, t, b)
	plain := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream})
	agg := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{}))
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for i := range perKey {
				p := plain
				if i%2 == 1 {
					p = agg
				}
				m := p.Message(aggMsg{Key: k, N: i}).PartitionKey(k)
				if i%3 == 0 {
					m.Header("n", fmt.Sprint(i))
				}
				if err := m.Publish(ctx); err != nil {
					t.Errorf("publish %s/%d: %v", k, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("received %d of %d messages", n, len(keys)*perKey)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if !slices.Equal(got[k], seq(perKey)) {
			t.Errorf("key %s received %v, want 0..%d in order", k, got[k], perKey-1)
		}
	}
	msgs, records := readMessages(ctx, t, api, stream)
	plainRecs := 0
	for _, m := range msgs {
		if !m.aggregated {
			plainRecs++
		}
	}
	if plainRecs != len(keys)*perKey/2 || records <= plainRecs {
		t.Errorf("%d records, %d of them plain, for %d messages: want half the messages plain, the other half in aggregates", records, plainRecs, len(keys)*perKey)
	}
}

// TestAggregatedPublishInsideAHandler: a handler publishes each message it
// handles on to another stream through an aggregating publisher, naming
// no key: each goes under the key of the record being handled (the key
// ladder's fourth rung), on that key's shard, each key in order.
func TestAggregatedPublishInsideAHandler(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	in, out := createStream(ctx, t, s, 1), createStream(ctx, t, s, 4)
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	next := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: out, Aggregate: true})
	keys := aggKeys(8)
	const perKey = 20
	done := make(chan struct{}, len(keys)*perKey)
	if _, err := runtime.Subscribe(b, in, func(ctx context.Context, m aggMsg, _ runtime.Delivery) runtime.Outcome {
		if err := next.Publish(ctx, m); err != nil {
			t.Errorf("publish %s/%d inside the handler: %v", m.Key, m.N, err)
		}
		done <- struct{}{}
		return runtime.Ack()
	}, runtime.Workers(8), runtime.ByKey(), runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(ctx, t, b)
	publishKeyed(ctx, t, keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: in})}, keys, 0, perKey)
	for range len(keys) * perKey {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the handler did not see every message")
		}
	}
	msgs, records := readMessages(ctx, t, s, out)
	want := eachKey(keys, perKey)
	if n := checkKeyed(t, msgs, want); n != 0 {
		t.Errorf("%d messages on a shard their key does not hash to", n)
	}
	if records >= len(msgs) {
		t.Errorf("%d records for %d messages: not aggregated", records, len(msgs))
	}
}

// throttleTwoOfThree refuses two of every three puts of each partition
// key (an aggregate's record key) as throttled.
func throttleTwoOfThree(s *kinesistest.Server) {
	var mu sync.Mutex
	attempts := map[string]int{}
	s.InjectPutFault(func(_, key string) error {
		mu.Lock()
		defer mu.Unlock()
		if attempts[key]++; attempts[key]%3 != 0 {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
		}
		return nil
	})
}

// TestAggregatedPublishUnderThrottling: two of every three puts of an
// aggregate are refused as throttled; every message is stored once, on its
// key's shard, each key in order, also a hot key whose aggregates queue
// behind its own retried one.
func TestAggregatedPublishUnderThrottling(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 4)
	throttleTwoOfThree(s)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})}
	// A hot key in small aggregates: many of its units queue behind the
	// one being retried, with the other keys' units going past them.
	hot := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "hot"},
		runtime.WithAggregation(runtime.Aggregation{MaxBytes: 1000}))
	hotMsgs := make([]aggMsg, 300)
	for i := range hotMsgs {
		hotMsgs[i] = aggMsg{Key: "hot", N: i}
	}
	keys := aggKeys(16)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := runtime.PublishAll(ctx, hot, hotMsgs); err != nil {
			t.Errorf("PublishAll: %v", err)
		}
	})
	publishKeyed(ctx, t, p, keys, 0, 40)
	wg.Wait()
	s.InjectPutFault(nil)
	msgs, _ := readMessages(ctx, t, s, stream)
	want := map[string]int{"hot": len(hotMsgs)}
	for _, k := range keys {
		want[k] = 40
	}
	if n := checkKeyed(t, msgs, want); n != 0 {
		t.Errorf("%d messages on a shard their key does not hash to", n)
	}
	if len(msgs) != 16*40+len(hotMsgs) {
		t.Errorf("read %d messages, want %d", len(msgs), 16*40+len(hotMsgs))
	}
}

// TestAggregatedPublishToDeletedStream: a stream deleted under a running
// aggregating publisher makes its publishes ErrStream errors naming it.
func TestAggregatedPublishToDeletedStream(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
	if err := p.Publish(ctx, aggMsg{N: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	var re *runtime.Error
	for range 50 { // the in-process deletion may take a moment
		err := p.Publish(ctx, aggMsg{N: 2})
		if errors.Is(err, runtime.ErrStream) && errors.As(err, &re) && re.Stream == stream {
			return
		}
		if err == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		t.Fatalf("publish to a deleted stream: %v, want ErrStream naming it", err)
	}
	t.Fatal("publishes to a deleted stream kept succeeding")
}

// TestAggregatedShutdownUnderLoad shuts the broker down while 64 goroutines
// publish through an aggregating publisher: every publish returns, with
// nil or ErrNotConnected, and every message whose publish returned nil is
// stored (nothing acknowledged is lost).
func TestAggregatedShutdownUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 4)
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})
	var mu sync.Mutex
	acked := map[string][]int{}
	var wg sync.WaitGroup
	for _, k := range aggKeys(64) {
		wg.Go(func() {
			for n := 0; ; n++ {
				err := p.Message(aggMsg{Key: k, N: n}).PartitionKey(k).Publish(ctx)
				if errors.Is(err, runtime.ErrNotConnected) {
					return
				}
				if err != nil {
					t.Errorf("publish %s/%d: %v", k, n, err)
					return
				}
				mu.Lock()
				acked[k] = append(acked[k], n)
				mu.Unlock()
			}
		})
	}
	// Shut down mid-load: once some publishes are acknowledged (a busy
	// machine may take longer than usual for the first), and others in flight.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	msgs, _ := readMessages(ctx, t, s, stream)
	stored := map[string][]int{}
	for _, m := range msgs {
		stored[m.Key] = append(stored[m.Key], m.N)
	}
	total := 0
	for k, ns := range acked {
		total += len(ns)
		// Stored: every acknowledged message, in order; possibly one more
		// whose publish was failed by the shutdown while in flight.
		if got := stored[k]; len(got) < len(ns) || !slices.Equal(got[:len(ns)], ns) {
			t.Errorf("key %s: acknowledged %d messages, stored %v", k, len(ns), got)
		}
	}
	if total == 0 {
		t.Fatal("nothing was published before the shutdown")
	}
}

// TestAggregatedLinger: with a linger, messages published together to an
// idle shard wait for each other and share one aggregate.
func TestAggregatedLinger(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{Linger: 200 * time.Millisecond}))}
	start := time.Now()
	publishKeyed(ctx, t, p, aggKeys(20), 0, 1)
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("published in %v, before the linger ended", waited)
	}
	if _, records := readMessages(ctx, t, s, stream); records != 1 {
		t.Errorf("20 messages published together in %d records, want one aggregate", records)
	}
}

// TestAggregatedRestartInsideAnAggregate: 50 messages in one aggregate; the
// first subscriber settles 0..19 and is stopped while 20 is unsettled; a
// new broker on the same lease store resumes inside the aggregate, at 20
// (checkpoint at the sub-sequence number), not at its start.
func TestAggregatedRestartInsideAnAggregate(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	store := lease.NewMemory()
	pb := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](pb, runtime.PublisherSpec{Stream: stream, PartitionKey: "alice"},
		runtime.WithAggregation(runtime.Aggregation{Linger: 100 * time.Millisecond}))
	batch := make([]aggMsg, 50)
	for i := range batch {
		batch[i] = aggMsg{Key: "alice", N: i}
	}
	if err := runtime.PublishAll(ctx, p, batch); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.Records(stream); len(recs) != 1 {
		t.Fatalf("%d records, want the 50 messages in one aggregate", len(recs))
	}

	broker := func(owner string, opts ...runtime.Option) *runtime.Broker {
		return runtime.NewBroker(append([]runtime.Option{runtime.WithKinesisClient(s), runtime.WithLeaseStore(store),
			runtime.WithOwnerID(owner), runtime.WithCheckpointInterval(50 * time.Millisecond), runtime.WithFailoverTime(time.Minute)}, opts...)...)
	}
	handled := make(chan int, 64)
	stuck := make(chan struct{})
	b1 := broker("first", runtime.WithShutdownTimeout(300*time.Millisecond))
	if _, err := runtime.Subscribe(b1, stream, func(ctx context.Context, m aggMsg, d runtime.Delivery) runtime.Outcome {
		if m.N == 20 {
			close(stuck)
			<-ctx.Done() // cancelled when the shutdown timeout ends
			return runtime.Ack()
		}
		handled <- m.N
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	if err := b1.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range 20 {
		if got := <-handled; got != want {
			t.Fatalf("first subscriber handled %d, want %d", got, want)
		}
	}
	<-stuck
	_ = b1.Shutdown(ctx) // times out waiting for message 20

	b2 := broker("second")
	again := make(chan int, 64)
	if _, err := runtime.Subscribe(b2, stream, func(_ context.Context, m aggMsg, d runtime.Delivery) runtime.Outcome {
		again <- m.N
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	connect(ctx, t, b2)
	for want := 20; want < 50; want++ {
		select {
		case got := <-again:
			if got != want {
				t.Fatalf("second subscriber got %d, want %d: it resumes after the last settled message of the aggregate", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("second subscriber never got %d", want)
		}
	}
}

// TestAggregatedBusyKeyHoldsBackOnlyItsOwn: while an aggregate of one key
// is refused (throttled) again and again, the messages of that key
// published after it wait, but the other keys of the shard are stored
// meanwhile; once the refusals stop, every message is stored once, each
// key in order.
func TestAggregatedBusyKeyHoldsBackOnlyItsOwn(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	var refuse atomic.Bool
	refuse.Store(true)
	s.InjectPutFault(func(_, key string) error {
		if key == "hot" && refuse.Load() {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
		}
		return nil
	})
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{MaxBytes: 1000}))}

	hot := make(chan error, 2)
	go func() { hot <- p.Publish(ctx, aggMsg{Key: "hot", N: 0}) }()
	for s.Calls(kinesistest.OpPutRecords) == 0 { // hot 0 is in flight, refused
		time.Sleep(time.Millisecond)
	}
	go func() { hot <- p.Publish(ctx, aggMsg{Key: "hot", N: 1}) }()
	others := aggKeys(20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishKeyed(ctx, t, p, others, 0, 10)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the other keys' messages waited for the refused key's aggregate")
	}
	select {
	case err := <-hot:
		t.Fatalf("a hot message returned (%v) while its key's aggregates were refused", err)
	default:
	}
	refuse.Store(false)
	for range 2 {
		if err := <-hot; err != nil {
			t.Fatalf("hot: %v", err)
		}
	}
	msgs, _ := readMessages(ctx, t, s, stream)
	want := map[string]int{"hot": 2}
	for _, k := range others {
		want[k] = 10
	}
	checkKeyed(t, msgs, want)
}

// TestAggregatedEachCallerGetsItsAggregatesOutcome: the service refuses
// one aggregate for good (its entry's ErrorCode is not retryable) and
// stores another, of the other shard: each caller whose message was in
// the refused aggregate gets that entry's error, each of the other gets
// nil and a receipt naming where its own message is; nothing of the
// refused aggregate is stored, and its keys publish again afterwards.
func TestAggregatedEachCallerGetsItsAggregatesOutcome(t *testing.T) {
	// On a virtual clock: the first message must open its shard's aggregate
	// before the others come, and on a loaded machine (CI) 30 ms of the real
	// clock did not see its goroutine get that far.
	synctest.Test(t, func(t *testing.T) {
		ctx := testContext(t, 30*time.Second)
		s := kinesistest.New()
		stream := createStream(ctx, t, s, 2)
		l, err := shard.List(ctx, s, stream)
		if err != nil {
			t.Fatal(err)
		}
		shardOf := func(key string) string {
			for _, id := range l.IDs() {
				if info, _ := l.Shard(id); info.Range.Contains(shard.HashKeyOf(key)) {
					return id
				}
			}
			t.Fatalf("no shard for %s", key)
			return ""
		}
		keys := aggKeys(24)
		bad := keys[0] // its aggregate is put under its key: the first message's
		badShard := shardOf(bad)
		s.InjectPutFault(func(_, key string) error {
			if key == bad {
				return &types.KMSAccessDeniedException{Message: aws.String("injected")}
			}
			return nil
		})
		b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
		p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
			runtime.WithAggregation(runtime.Aggregation{Linger: 300 * time.Millisecond}))
		type result struct {
			key string
			r   runtime.Receipt
			err error
		}
		results := make(chan result, len(keys))
		send := func(k string) {
			r, err := p.Message(aggMsg{Key: k}).PartitionKey(k).Send(ctx)
			results <- result{k, r, err}
		}
		go send(bad)
		time.Sleep(30 * time.Millisecond) // bad opens its shard's aggregate; the others join it within the linger
		for _, k := range keys[1:] {
			go send(k)
		}
		refused, storedOK := 0, 0
		receipts := map[string]runtime.Receipt{}
		for range keys {
			res := <-results
			if shardOf(res.key) == badShard {
				var ee *runtime.EntryError
				if !errors.Is(res.err, runtime.ErrPublish) || !errors.As(res.err, &ee) || ee.Code != "KMSAccessDeniedException" {
					t.Errorf("key %s, in the refused aggregate: %v, want ErrPublish with its entry's KMSAccessDeniedException", res.key, res.err)
				}
				refused++
				continue
			}
			if res.err != nil || res.r.ShardID != shardOf(res.key) || res.r.SequenceNumber == "" || res.r.PartitionKey != res.key {
				t.Errorf("key %s, in the stored aggregate: receipt %+v, %v", res.key, res.r, res.err)
			}
			receipts[res.key] = res.r
			storedOK++
		}
		if refused < 2 || storedOK < 2 {
			t.Fatalf("%d messages in the refused aggregate, %d in the stored one: want several of each", refused, storedOK)
		}
		msgs, _ := readMessages(ctx, t, s, stream)
		if len(msgs) != storedOK {
			t.Errorf("%d messages stored, want the %d acknowledged", len(msgs), storedOK)
		}
		for _, m := range msgs {
			if r := receipts[m.key]; m.shard != r.ShardID || m.seq != r.SequenceNumber || m.sub != r.SubSequence {
				t.Errorf("message of %s stored at %s/%s/%d, its receipt says %+v", m.key, m.shard, m.seq, m.sub, r)
			}
		}
		s.InjectPutFault(nil)
		if err := p.Message(aggMsg{Key: bad, N: 1}).PartitionKey(bad).Publish(ctx); err != nil {
			t.Errorf("after the refusals: %v", err)
		}
	})
}

// TestAggregatedCallerGivesUp: callers whose ctx ends before their
// message is sent (waiting behind their key's aggregate in flight, or in
// the shard's open aggregate) get ErrPublish saying it was not sent, and it
// is not stored; a caller whose ctx ends while its aggregate is in flight
// is told it may have been written (it was); the key's later message goes
// once the one in flight returns, in order.
func TestAggregatedCallerGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := holdPuts(ctx, t, "hot", time.Minute)
	s, stream, p, held, releaseAll := h.s, h.stream, h.p, h.held, h.release
	publish := func(ctx context.Context, key string, n int) chan error {
		ch := make(chan error, 1)
		go func() { ch <- p.Publish(ctx, aggMsg{Key: key, N: n}) }()
		return ch
	}
	inFlightCtx, giveUpInFlight := context.WithCancel(ctx)
	hot0 := publish(inFlightCtx, "hot", 0)
	<-held // hot 0's aggregate is in flight
	lineCtx, giveUpLine := context.WithCancel(ctx)
	hot1 := publish(lineCtx, "hot", 1) // waits behind hot 0: same key
	openCtx, giveUpOpen := context.WithCancel(ctx)
	other := publish(openCtx, "other", 0) // fills the open aggregate while hot 0 is in flight
	time.Sleep(50 * time.Millisecond)
	hot2 := publish(ctx, "hot", 2)
	time.Sleep(50 * time.Millisecond)

	giveUpLine()
	giveUpOpen()
	for name, ch := range map[string]chan error{"hot 1 (behind its key)": hot1, "other 0 (in the open aggregate)": other} {
		if err := <-ch; !errors.Is(err, runtime.ErrPublish) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
			t.Errorf("%s, its caller gone: %v, want ErrPublish: not sent", name, err)
		}
	}
	giveUpInFlight()
	if err := <-hot0; !errors.Is(err, runtime.ErrPublish) || !errors.Is(err, runtime.ErrMayBeStored) || !strings.Contains(err.Error(), "may have been written") {
		t.Errorf("hot 0, its caller gone while in flight: %v, want ErrPublish and ErrMayBeStored: may have been written", err)
	}
	releaseAll()
	if err := <-hot2; err != nil {
		t.Fatalf("hot 2: %v", err)
	}
	if got, want := storedKeyN(ctx, t, s, stream), []string{"hot/0", "hot/2"}; !slices.Equal(got, want) {
		t.Errorf("stored %v, want %v: what was in flight, then the key's next message, and nothing its caller gave up before it was sent", got, want)
	}
}

// TestSendAll publishes many keys' messages with SendAll, each message
// under its own key (one with headers, one with a key that is refused
// before any I/O): each gets its own receipt, naming where it is stored;
// the bad one fails alone; aggregated and plain publishers alike.
func TestSendAll(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 4)
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: agg})
			keys := aggKeys(30)
			var msgs []*runtime.Message[aggMsg]
			for n := range 5 {
				for _, k := range keys {
					msgs = append(msgs, p.Message(aggMsg{Key: k, N: n}).PartitionKey(k))
				}
			}
			msgs[7].Header("trace", "t7")
			msgs = append(msgs, p.Message(aggMsg{Key: "", N: 0}).PartitionKey(""))
			receipts, err := runtime.SendAll(ctx, msgs)
			if !errors.Is(err, runtime.ErrPublish) || strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("SendAll: %v, want the empty key's ErrPublish alone", err)
			}
			if len(receipts) != len(msgs) || receipts[len(msgs)-1] != (runtime.Receipt{}) {
				t.Fatalf("%d receipts for %d messages, the failed one %+v", len(receipts), len(msgs), receipts[len(msgs)-1])
			}
			checkRounds(ctx, t, s, stream, keys, receipts[:len(msgs)-1])
		})
	}
}

// TestStartAll keeps five batches on their way at once with StartAll while
// the service holds every put: each StartAll returns without waiting, no
// Wait returns while the puts are held, and once they go each key's
// messages are stored once, in publish order across the batches, each
// Wait giving SendAll's receipts and the refused message's error alone;
// aggregated and plain publishers alike.
func TestStartAll(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 4)
			held := make(chan struct{}, 1)
			release := make(chan struct{})
			releaseAll := sync.OnceFunc(func() { close(release) })
			s.InjectPutFault(func(_, _ string) error {
				select {
				case held <- struct{}{}:
				default:
				}
				<-release
				return nil
			})
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
			defer releaseAll()
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: agg})
			keys := aggKeys(30)
			var batches [][]*runtime.Message[aggMsg]
			var pending []*runtime.Pending
			for n := range 5 {
				var msgs []*runtime.Message[aggMsg]
				for _, k := range keys {
					msgs = append(msgs, p.Message(aggMsg{Key: k, N: n}).PartitionKey(k))
				}
				if n == 2 {
					msgs = append(msgs, p.Message(aggMsg{Key: "", N: 0}).PartitionKey(""))
				}
				batches = append(batches, msgs)
				pending = append(pending, runtime.StartAll(ctx, msgs))
			}
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("no put reached the service")
			}
			waited := make(chan struct{})
			var first []runtime.Receipt
			var firstErr error
			go func() {
				defer close(waited)
				first, firstErr = pending[0].Wait()
			}()
			select {
			case <-waited:
				t.Fatal("the first batch's Wait returned while its puts were held")
			case <-time.After(50 * time.Millisecond):
			}
			releaseAll()
			<-waited
			if firstErr != nil || len(first) != len(keys) {
				t.Fatalf("batch 0: %d receipts, %v", len(first), firstErr)
			}
			receipts := first
			for n, pd := range pending[1:] {
				n++
				r, err := pd.Wait()
				if n == 2 && (!errors.Is(err, runtime.ErrPublish) || strings.Count(err.Error(), "\n") != 0) {
					t.Errorf("batch 2: %v, want the empty key's ErrPublish alone", err)
				} else if n != 2 && err != nil {
					t.Errorf("batch %d: %v", n, err)
				}
				if len(r) != len(batches[n]) {
					t.Fatalf("batch %d: %d receipts for %d messages", n, len(r), len(batches[n]))
				}
				receipts = append(receipts, r[:len(keys)]...)
				if again, errAgain := pd.Wait(); !slices.Equal(again, r) || fmt.Sprint(errAgain) != fmt.Sprint(err) {
					t.Errorf("batch %d waited for again: %v, %v; want what the first Wait gave", n, errAgain, again)
				}
			}
			checkRounds(ctx, t, s, stream, keys, receipts)
		})
	}
}

// TestStartAllKeepsNoneOfItsSlice: the slice given to StartAll may be
// reused as soon as it returns; the messages it held are published as
// they were.
func TestStartAllKeepsNoneOfItsSlice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := holdPuts(ctx, t, "customer-000", time.Minute)
	keys := aggKeys(10)
	msgs := make([]*runtime.Message[aggMsg], 0, len(keys))
	for _, k := range keys {
		msgs = append(msgs, h.msg(k, 0))
	}
	pd := runtime.StartAll(ctx, msgs)
	<-h.held // on their way
	for i := range msgs {
		msgs[i] = h.p.Message(aggMsg{Key: "reused", N: i}).PartitionKey("reused")
	}
	h.release()
	if _, err := pd.Wait(); err != nil {
		t.Fatal(err)
	}
	stored, _ := readMessages(ctx, t, h.s, h.stream)
	want := eachKey(keys, 1)
	checkKeyed(t, stored, want)
}

// TestStartAllCallerGivesUp: a batch whose ctx ends after StartAll returned
// and before Wait is told, message by message, what became of it: the
// message waiting behind its key's aggregate in flight and the one in the
// shard's open aggregate were not sent (and are not stored); the batch in
// flight, under a ctx that did not end, is stored.
func TestStartAllCallerGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := holdPuts(ctx, t, "hot", time.Minute)
	first := runtime.StartAll(ctx, []*runtime.Message[aggMsg]{h.msg("hot", 0)})
	<-h.held // hot 0's aggregate is in flight
	later, giveUp := context.WithCancel(ctx)
	second := runtime.StartAll(later, []*runtime.Message[aggMsg]{h.msg("other", 0), h.msg("hot", 1)})
	giveUp()
	checkNotSent(t, "the second batch, its ctx ended", 2, second)
	h.release()
	if _, err := first.Wait(); err != nil {
		t.Fatalf("the first batch: %v", err)
	}
	if got, want := storedKeyN(ctx, t, h.s, h.stream), []string{"hot/0"}; !slices.Equal(got, want) {
		t.Errorf("stored %v, want %v: the batch in flight, and nothing of the one given up before it was sent", got, want)
	}
}

// A batch that nobody waits for still ends with its ctx, as StartAll's doc
// says: its messages not yet sent when the ctx ends are never sent, those
// behind their key's record in flight and (aggregated) those in the
// shard's open aggregate alike; their keys' later messages are sent; and a
// Wait long after says "not sent" for each of them.
func TestStartAllNeverWaitedForStillEndsWithItsCtx(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var opts []runtime.PublishOption
			if !agg {
				opts = append(opts, runtime.WithoutAggregation())
			}
			h := holdPuts(ctx, t, "hot", time.Minute, opts...)
			first := runtime.StartAll(ctx, []*runtime.Message[aggMsg]{h.msg("hot", 0)})
			<-h.held // hot 0 is in flight
			// Plain, "other" would go at once, beside hot 0; aggregated, it
			// waits in the shard's open aggregate while hot 0's is in flight.
			givenUp := []*runtime.Message[aggMsg]{h.msg("hot", 1)}
			if agg {
				givenUp = append(givenUp, h.msg("other", 0))
			}
			later, giveUp := context.WithCancel(ctx)
			second := runtime.StartAll(later, givenUp)
			giveUp()
			h.release()
			if _, err := first.Wait(); err != nil {
				t.Fatalf("the first batch: %v", err)
			}
			// Sent after the given-up messages in their keys' order: once
			// these are stored, the given-up ones were sent or dropped.
			if _, err := runtime.SendAll(ctx, []*runtime.Message[aggMsg]{h.msg("hot", 2), h.msg("other", 1)}); err != nil {
				t.Fatalf("the third batch: %v", err)
			}
			got := storedKeyN(ctx, t, h.s, h.stream)
			slices.Sort(got)
			if want := []string{"hot/0", "hot/2", "other/1"}; !slices.Equal(got, want) {
				t.Errorf("stored %v, want %v: nothing of the batch given up before it was sent", got, want)
			}
			checkNotSent(t, "the given-up batch, waited for at last", len(givenUp), second)
		})
	}
}

// storedKeyN reads stream back and names each message stored by its key
// and N ("hot/0"), in the order read.
func storedKeyN(ctx context.Context, t *testing.T, api kinesisapi.API, stream string) []string {
	t.Helper()
	msgs, _ := readMessages(ctx, t, api, stream)
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprint(m.Key, "/", m.N))
	}
	return got
}

// checkNotSent checks that pd, a batch of n messages whose ctx ended before
// any was sent, reports "not sent" for each (ErrPublish, context.Canceled)
// and zero receipts.
func checkNotSent(t *testing.T, what string, n int, pd *runtime.Pending) {
	t.Helper()
	receipts, err := pd.Wait()
	if sent := strings.Count(fmt.Sprint(err), "not sent"); !errors.Is(err, runtime.ErrPublish) || !errors.Is(err, context.Canceled) || sent != n {
		t.Errorf("%s: %v; want ErrPublish: not sent, for each of its %d messages", what, err, n)
	}
	if !slices.Equal(receipts, make([]runtime.Receipt, n)) {
		t.Errorf("receipts of messages not sent: %+v, want zero", receipts)
	}
}

// checkRounds checks a stream holding five rounds of messages, N 0 to 4
// of each key in keys: each key's messages are stored once, in order, and
// receipts[i], of round i/len(keys) of key i%len(keys), names where that
// message is stored.
func checkRounds(ctx context.Context, t *testing.T, s kinesisapi.API, stream string, keys []string, receipts []runtime.Receipt) {
	t.Helper()
	stored, _ := readMessages(ctx, t, s, stream)
	want := eachKey(keys, 5)
	checkKeyed(t, stored, want)
	at := map[string]storedMsg{}
	for _, m := range stored {
		at[fmt.Sprint(m.Key, "/", m.N)] = m
	}
	for i, r := range receipts {
		m := at[fmt.Sprint(r.PartitionKey, "/", i/len(keys))]
		if r.PartitionKey != keys[i%len(keys)] || m.shard != r.ShardID || m.seq != r.SequenceNumber || m.sub != r.SubSequence {
			t.Errorf("message %d: receipt %+v, stored at %s/%s/%d under %s", i, r, m.shard, m.seq, m.sub, m.key)
		}
	}
}

// TestAggregatedReshardWhilePublishing splits both shards of a stream while
// 32 keys publish without pause through an aggregating publisher: every
// publish succeeds, and every acknowledged message is stored on the shard
// its key hashes to (a reader that drops aggregates holding another
// shard's keys reads each key's messages once, in order; one that skips
// only such sub-records, as this runtime's subscribers do, reads them in
// order, some twice).
func TestAggregatedReshardWhilePublishing(t *testing.T) {
	s := kinesistest.New()
	testAggregatedReshardWhilePublishing(t, s, splitBoth, 4, runtime.WithKinesisClient(s))
}

func TestAggregatedReshardWhilePublishingKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedReshardWhilePublishing(t, api, splitBoth, 4, opts...)
}

// TestAggregatedMergeWhilePublishing is the same with the two shards
// merged into one: the aggregates sent to the second parent land on the
// child, which holds all their keys, so they stand (not sent again).
func TestAggregatedMergeWhilePublishing(t *testing.T) {
	s := kinesistest.New()
	testAggregatedReshardWhilePublishing(t, s, mergeBoth, 1, runtime.WithKinesisClient(s))
}

func TestAggregatedMergeWhilePublishingKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedReshardWhilePublishing(t, api, mergeBoth, 1, opts...)
}

// splitBoth splits both shards of a 2-shard stream in half, one after
// the other, waiting for acknowledged messages between the splits.
func splitBoth(ctx context.Context, t *testing.T, api kinesisapi.API, stream string, waitAll func(int64)) {
	splitInHalf(ctx, t, api, stream, "shardId-000000000000")
	waitAll(10)
	splitInHalf(ctx, t, api, stream, "shardId-000000000001")
}

// mergeBoth merges the two shards of a 2-shard stream and waits for the
// stream to be active again.
func mergeBoth(ctx context.Context, t *testing.T, api kinesisapi.API, stream string, _ func(int64)) {
	t.Helper()
	if _, err := api.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: &stream,
		ShardToMerge: aws.String("shardId-000000000000"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	waitActive(ctx, t, api, stream, " after a merge")
}

func testAggregatedReshardWhilePublishing(t *testing.T, api kinesisapi.API,
	reshard func(context.Context, *testing.T, kinesisapi.API, string, func(int64)), wantOpen int, opts ...runtime.Option) {
	ctx := testContext(t, 90*time.Second)
	stream := createStream(ctx, t, api, 2)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{Linger: 2 * time.Millisecond}))}

	keys := aggKeys(32)
	var stop atomic.Bool
	acked := make([]atomic.Int64, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				if err := p.Publish(ctx, aggMsg{Key: k, N: n}); err != nil {
					t.Errorf("publish %s/%d: %v", k, n, err)
					return
				}
				acked[i].Store(int64(n + 1))
			}
		})
	}
	// waitAll waits until every key has had n more messages acknowledged.
	waitAll := func(n int64) {
		base := make([]int64, len(keys))
		for i := range acked {
			base[i] = acked[i].Load()
		}
		for i := range acked {
			for acked[i].Load() < base[i]+n {
				if ctx.Err() != nil || t.Failed() {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	waitAll(10)
	reshard(ctx, t, api, stream, waitAll)
	waitAll(20)
	stop.Store(true)
	wg.Wait()

	msgs, _ := readMessages(ctx, t, api, stream)
	want := map[string]int{}
	for i, k := range keys {
		want[k] = int(acked[i].Load())
	}
	// Every publish that returned nil is counted (a goroutine counts
	// before it looks at stop), and nothing else was published.
	misplaced := checkKeyed(t, msgs, want)
	l, err := shard.List(ctx, api, stream)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for _, m := range msgs {
		if info, _ := l.Shard(m.shard); !info.Range.Contains(shard.HashKeyOf(m.key)) {
			continue // skipped by this runtime's subscribers, as by the KCL
		}
		if prev, ok := last[m.Key]; ok && m.N < prev {
			t.Errorf("key %s: message %d stored after %d on its shards", m.Key, m.N, prev)
		}
		last[m.Key] = m.N
	}
	open := 0
	for _, id := range l.IDs() {
		if info, _ := l.Shard(id); !info.Closed {
			open++
		}
	}
	if open != wantOpen {
		t.Errorf("%d open shards after the reshard, want %d", open, wantOpen)
	}
	t.Logf("%d messages stored, %d in aggregates that landed on a shard not holding all their keys (sent again)", len(msgs), misplaced)
}

// TestAggregatedStreamDeletedUnderLoad deletes the stream while 32 keys
// publish without pause through an aggregating publisher: every publish
// returns, each with nil or an ErrStream error naming the stream, and
// every publisher has stopped within seconds of the deletion.
func TestAggregatedStreamDeletedUnderLoad(t *testing.T) {
	s := kinesistest.New()
	testAggregatedStreamDeletedUnderLoad(t, s, runtime.WithKinesisClient(s))
}

func TestAggregatedStreamDeletedUnderLoadKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedStreamDeletedUnderLoad(t, api, opts...)
}

func testAggregatedStreamDeletedUnderLoad(t *testing.T, api kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 4)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})}
	var published atomic.Int64
	errs := make(chan error, 32)
	for _, k := range aggKeys(32) {
		go func() {
			for n := 0; ; n++ {
				if err := p.Publish(ctx, aggMsg{Key: k, N: n}); err != nil {
					errs <- err
					return
				}
				published.Add(1)
			}
		}()
	}
	for published.Load() < 500 {
		time.Sleep(time.Millisecond)
	}
	if _, err := api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(15 * time.Second)
	for i := range 32 {
		select {
		case err := <-errs:
			var re *runtime.Error
			if !errors.Is(err, runtime.ErrStream) || !errors.As(err, &re) || re.Stream != stream {
				t.Errorf("publisher %d stopped with %v, want an ErrStream error naming %s", i, err, stream)
			}
		case <-deadline:
			t.Fatalf("%d of 32 publishers still publishing 15 s after their stream was deleted", 32-i)
		}
	}
}

// TestAggregatedStreamRecreated deletes a 2-shard stream under a running
// aggregating publisher, creates it again under the same name with 4
// shards (the same shard ids, other hash ranges) and publishes on: every
// publish after the deletion is an ErrStream error or stored, and every
// acknowledged message is on the shard its key hashes to in the new
// stream, each key's messages once and in order. The publisher must not
// keep routing by the deleted stream's shard map: an aggregate sent with
// the old shardId-000000000000's hash key lands on the new shard of that
// id, which holds only part of the old one's keys.
func TestAggregatedStreamRecreated(t *testing.T) {
	s := kinesistest.New()
	testAggregatedStreamRecreated(t, s, runtime.WithKinesisClient(s))
}

func TestAggregatedStreamRecreatedKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedStreamRecreated(t, api, opts...)
}

// TestAggregatedStreamRecreatedKinesisMock is the same on kinesis-mock.
func TestAggregatedStreamRecreatedKinesisMock(t *testing.T) {
	api, opts := liveClient(livetest.KinesisMockEndpoint(t))
	testAggregatedStreamRecreated(t, api, opts...)
}

func testAggregatedStreamRecreated(t *testing.T, api kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 2)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{Linger: 5 * time.Millisecond}))}
	keys := aggKeys(32)
	publishKeyed(ctx, t, p, keys, 0, 5) // the publisher lists the two shards

	if _, err := api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s still there after DeleteStream: %v", stream, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// While it is gone, each publish is an ErrStream error naming it.
	var re *runtime.Error
	if err := p.Publish(ctx, aggMsg{Key: keys[0], N: -1}); !errors.Is(err, runtime.ErrStream) || !errors.As(err, &re) || re.Stream != stream {
		t.Fatalf("publish to the deleted stream: %v, want ErrStream naming it", err)
	}
	shards := int32(4)
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &stream, ShardCount: &shards}); err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, api, stream, " again")
	// The keys publish at once and linger together: the first aggregates
	// hold keys of several new shards.
	publishKeyed(ctx, t, p, keys, 0, 20)

	msgs, _ := readMessages(ctx, t, api, stream)
	want := eachKey(keys, 20)
	misplaced := checkKeyed(t, msgs, want)
	t.Logf("%d messages in the new stream, %d in aggregates that landed on a shard not holding all their keys (sent again)", len(msgs), misplaced)
}

// TestAggregatedStreamRecreatedWhileIdle is the re-creation the publisher
// does not see fail: it publishes to a 2-shard stream, and while it is
// idle (no publish in between) the stream is deleted and created again
// with 3 shards, whose shardId-000000000000 and shardId-000000000001 start
// at other hash keys. An aggregate sent with the old shard's starting hash
// key lands on the new shard of the same id, which holds only part of its
// keys: the shard id it was answered is the one it was sent to, so only
// the stream's identity (or a listing) can tell. Every message the
// publisher calls stored must be where a reader that checks hash ranges
// takes it: each key's messages once and in order.
func TestAggregatedStreamRecreatedWhileIdle(t *testing.T) {
	s := kinesistest.New()
	testAggregatedStreamRecreatedWhileIdle(t, s, runtime.WithKinesisClient(s))
}

func TestAggregatedStreamRecreatedWhileIdleKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedStreamRecreatedWhileIdle(t, api, opts...)
}

func TestAggregatedStreamRecreatedWhileIdleKinesisMock(t *testing.T) {
	api, opts := liveClient(livetest.KinesisMockEndpoint(t))
	testAggregatedStreamRecreatedWhileIdle(t, api, opts...)
}

func testAggregatedStreamRecreatedWhileIdle(t *testing.T, api kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 2)
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{Linger: 5 * time.Millisecond}))}
	keys := aggKeys(32)
	publishKeyed(ctx, t, p, keys, 0, 5) // the publisher lists the two shards

	deleted := time.Now()
	if _, err := api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s still there after DeleteStream: %v", stream, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	shards := int32(3)
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &stream, ShardCount: &shards}); err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, api, stream, " again")
	// The service takes seconds to delete a stream and create it again;
	// these servers take none, so the publisher stays idle as long.
	time.Sleep(time.Until(deleted.Add(1500 * time.Millisecond)))
	publishKeyed(ctx, t, p, keys, 0, 20)

	msgs, _ := readMessages(ctx, t, api, stream)
	misplaced := checkKeyed(t, msgs, eachKey(keys, 20))
	t.Logf("%d messages in the new stream, %d in aggregates that landed on a shard not holding all their keys (sent again)", len(msgs), misplaced)
}

// TestAggregatedMapCheckedOnlyAfterIdling bounds what the re-creation
// check costs: a publisher that keeps publishing confirms its shard map
// with each answer and lists the shards once in 2.5 s; one idle for over
// a second lists them once before its next aggregate, and does not send
// anything again (the stream is the same).
func TestAggregatedMapCheckedOnlyAfterIdling(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{}))}
	keys := aggKeys(8)
	// A stall of this process near the trust time (a loaded -race run can
	// pause it that long between two publishes, or hold one answer) is an
	// idle second, or a late answer, to the publisher too: it may list once
	// more for each, never more.
	const stall = 900 * time.Millisecond
	var stalls int64
	n := 0
	last := time.Now()
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; n++ {
		began := time.Now()
		if began.Sub(last) >= stall {
			stalls++
		}
		publishKeyed(ctx, t, p, keys, n, n+1)
		if time.Since(began) >= stall {
			stalls++
		}
		last = time.Now()
		time.Sleep(20 * time.Millisecond)
	}
	listed := s.Calls(kinesistest.OpListShards)
	if listed < 1 || listed > 1+stalls {
		t.Errorf("%d ListShards calls over 2.5 s of publishing (%d stalls of this process over %v), want 1", listed, stalls, stall)
	}
	time.Sleep(1100 * time.Millisecond)
	publishKeyed(ctx, t, p, keys, n, n+1)
	if got := s.Calls(kinesistest.OpListShards); got != listed+1 {
		t.Errorf("%d ListShards calls after an idle second, want %d", got, listed+1)
	}
	msgs, _ := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, eachKey(keys, n+1))
}

// TestAggregatedLateAnswerOnAnUnchangedStream holds one key's aggregate
// in the server for 1.5 s, past the time an answer is trusted without a
// listing, while other keys go on publishing: they are not held back, the
// late aggregate is settled by one listing as stored (not sent again),
// and every message is in the stream once.
func TestAggregatedLateAnswerOnAnUnchangedStream(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{}))}
	keys := aggKeys(8)
	publishKeyed(ctx, t, p, keys, 0, 1)

	var hold atomic.Bool
	hold.Store(true)
	held, release := make(chan struct{}), make(chan struct{})
	heldOnce := sync.OnceFunc(func() { close(held) })
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	s.InjectPutFault(func(_, key string) error {
		if key == keys[0] && hold.CompareAndSwap(true, false) {
			heldOnce()
			<-release
		}
		return nil
	})
	slow := make(chan error, 1)
	go func() { slow <- p.Publish(ctx, aggMsg{Key: keys[0], N: 1}) }()
	<-held
	// The other keys publish one after another meanwhile.
	start := time.Now()
	rounds := 1
	for ; time.Since(start) < 1500*time.Millisecond; rounds++ {
		publishKeyed(ctx, t, p, keys[1:], rounds, rounds+1)
		time.Sleep(20 * time.Millisecond)
	}
	if rounds < 5 {
		t.Errorf("the other keys published %d rounds in 1.5 s while one aggregate was held, want them not held back", rounds)
	}
	releaseAll()
	if err := <-slow; err != nil {
		t.Fatalf("the late aggregate's publish: %v", err)
	}
	want := eachKey(keys[1:], rounds)
	want[keys[0]] = 2
	msgs, _ := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, want)
	if len(msgs) != 2+7*rounds {
		t.Errorf("%d messages in the stream, want %d: the late aggregate was sent again", len(msgs), 2+7*rounds)
	}
	t.Logf("%d rounds of the other keys while one was held; %d ListShards calls", rounds, s.Calls(kinesistest.OpListShards))
}

// TestAggregatedStreamRecreatedUnderAnAggregateInFlight holds the
// aggregates of a busy publisher in the server while their stream is
// deleted and created again with 3 shards, and lets them through seconds
// later: they land on the new stream's shards of the ids they were sent
// to, which do not hold all their keys. The answers come too long after
// the map was last known to be right to be trusted: the messages are
// stored where a reader that checks hash ranges takes them, each once.
func TestAggregatedStreamRecreatedUnderAnAggregateInFlight(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{Linger: 5 * time.Millisecond}))}
	keys := aggKeys(32)
	publishKeyed(ctx, t, p, keys, 0, 1)

	var hold atomic.Bool
	hold.Store(true)
	held, release := make(chan struct{}), make(chan struct{})
	heldOnce := sync.OnceFunc(func() { close(held) })
	releaseAll := sync.OnceFunc(func() { hold.Store(false); close(release) })
	t.Cleanup(releaseAll)
	s.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op == kinesistest.OpPutRecords && hold.Load() {
			heldOnce()
			<-release
		}
		return nil
	})
	sent := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); publishKeyed(ctx, t, p, keys, 0, 1) }()
	<-held
	if _, err := s.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddStream(stream, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(sent.Add(1500 * time.Millisecond)))
	releaseAll()
	<-done

	msgs, _ := readMessages(ctx, t, s, stream)
	misplaced := checkKeyed(t, msgs, eachKey(keys, 1))
	t.Logf("%d messages in the new stream, %d in aggregates that landed on a shard not holding all their keys (sent again)", len(msgs), misplaced)
}

// TestAggregatedStreamRecreatedUnderTwoCallsInFlight is the re-creation
// under two calls in flight, answered one second apart, both too late to
// be trusted: the listing after the first finds the map changed while
// the second is still in flight, and waits for it before re-routing. The
// keys of each call hash outside the new shard of its id, so both
// aggregates must be sent again: every key is read once, in range.
func TestAggregatedStreamRecreatedUnderTwoCallsInFlight(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{Linger: 5 * time.Millisecond}))}
	// Keys of the old shard 0 (below 2^127) that the new shard 0 (below
	// 2^128/3) does not hold, and of the old shard 1 that the new shard 1
	// (below 2*2^128/3) does not hold.
	var low, high []string
	for _, k := range aggKeys(200) {
		switch hi := shard.HashKeyOf(k).Hi; {
		case hi > math.MaxUint64/3+1 && hi < 1<<63 && len(low) < 8:
			low = append(low, k)
		case hi > math.MaxUint64/3*2+1 && len(high) < 8:
			high = append(high, k)
		}
	}
	publishKeyed(ctx, t, p, append(slices.Clone(low), high...), 0, 1)

	var calls atomic.Int32
	gates := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	entered := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	release := [2]func(){sync.OnceFunc(func() { close(gates[0]) }), sync.OnceFunc(func() { close(gates[1]) })}
	t.Cleanup(func() { release[0](); release[1]() })
	s.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op == kinesistest.OpPutRecords {
			// A call past the first two (a loaded machine split a group's
			// keys over two aggregates) is held with the second: let
			// through, it landed in the new stream just after its
			// creation, within aggMapTrust of the map's last
			// confirmation, which an instant re-creation (the
			// in-process server's) defeats, as aggMapTrust says.
			n := calls.Add(1)
			if n <= 2 {
				close(entered[n-1])
			}
			<-gates[min(n, 2)-1]
		}
		return nil
	})
	sent := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { publishKeyed(ctx, t, p, low, 0, 1) })
	<-entered[0]
	wg.Go(func() { publishKeyed(ctx, t, p, high, 0, 1) })
	<-entered[1]
	if _, err := s.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddStream(stream, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(sent.Add(1500 * time.Millisecond)))
	release[0]()
	time.Sleep(time.Second)
	release[1]()
	wg.Wait()

	msgs, _ := readMessages(ctx, t, s, stream)
	misplaced := checkKeyed(t, msgs, eachKey(append(slices.Clone(low), high...), 1))
	t.Logf("%d messages in the new stream, %d in aggregates that landed on a shard not holding all their keys (sent again)", len(msgs), misplaced)
	if misplaced != len(low)+len(high) {
		t.Errorf("%d misplaced messages, want both aggregates (%d) misplaced: the scenario was not exercised", misplaced, len(low)+len(high))
	}
}

// TestAggregatedInFlightWait holds one aggregate's call in the server and
// publishes another key's message on the same shard: with InFlightWait
// negative it is sent beside the one in flight and returns while that one
// is still held; with a long InFlightWait it waits for it.
func TestAggregatedInFlightWait(t *testing.T) {
	for _, tc := range []struct {
		wait    time.Duration
		besides bool // the second message returns while the first is held
	}{{-1, true}, {time.Minute, false}} {
		t.Run(fmt.Sprintf("wait=%v", tc.wait), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h := holdPuts(ctx, t, "slow", tc.wait)
			s, stream, p, held, releaseAll := h.s, h.stream, h.p, h.held, h.release
			slow := make(chan error, 1)
			go func() { slow <- p.Publish(ctx, aggMsg{Key: "slow", N: 0}) }()
			<-held
			fast := make(chan error, 1)
			go func() { fast <- p.Publish(ctx, aggMsg{Key: "fast", N: 0}) }()
			select {
			case err := <-fast:
				if !tc.besides {
					t.Fatalf("fast returned (%v) while the aggregate in flight was held, within a wait of %v", err, tc.wait)
				}
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(map[bool]time.Duration{true: 10 * time.Second, false: 300 * time.Millisecond}[tc.besides]):
				if tc.besides {
					t.Fatal("fast waited for the aggregate in flight though InFlightWait is negative")
				}
			}
			releaseAll()
			if err := <-slow; err != nil {
				t.Fatal(err)
			}
			if !tc.besides {
				if err := <-fast; err != nil {
					t.Fatal(err)
				}
			}
			msgs, records := readMessages(ctx, t, s, stream)
			if records != 2 {
				t.Errorf("%d records, want two aggregates", records)
			}
			checkKeyed(t, msgs, map[string]int{"slow": 1, "fast": 1})
		})
	}
}

// TestWithoutAggregation: a publisher of a type marked aggregate
// (PublisherSpec.Aggregate, as generated) given WithoutAggregation puts
// each message in a record of its own; of WithAggregation and
// WithoutAggregation the last given wins.
func TestWithoutAggregation(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	keys := aggKeys(8)
	const perKey = 10
	for _, tc := range []struct {
		name       string
		opts       []runtime.PublishOption
		aggregated bool
	}{
		{"marker", nil, true},
		{"without", []runtime.PublishOption{runtime.WithoutAggregation()}, false},
		{"without then with", []runtime.PublishOption{runtime.WithoutAggregation(), runtime.WithAggregation(runtime.Aggregation{})}, true},
		{"with then without", []runtime.PublishOption{runtime.WithAggregation(runtime.Aggregation{}), runtime.WithoutAggregation()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := createStream(ctx, t, s, 2)
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true}, tc.opts...)
			// Every key's messages at once, so that an aggregating
			// publisher has company for each aggregate.
			publishKeyed(ctx, t, keyedPublisher{p}, keys, 0, perKey)
			msgs, records := readMessages(ctx, t, s, stream)
			want := eachKey(keys, perKey)
			checkKeyed(t, msgs, want)
			aggregated := 0
			for _, m := range msgs {
				if m.aggregated {
					aggregated++
				}
			}
			switch {
			case tc.aggregated && (aggregated != len(msgs) || records >= len(msgs)):
				t.Errorf("%d records for %d messages, %d in aggregates: want every message in an aggregate", records, len(msgs), aggregated)
			case !tc.aggregated && (aggregated != 0 || records != len(msgs)):
				t.Errorf("%d records for %d messages, %d in aggregates: want a record per message", records, len(msgs), aggregated)
			}
		})
	}
}

// heldPuts is an aggregating publisher on a one-shard in-process stream
// whose server holds every put of one key's aggregate until release.
type heldPuts struct {
	s       *kinesistest.Server
	stream  string
	p       keyedPublisher
	held    chan struct{} // closed when the first put of the key arrives
	release func()        // lets every held put go (idempotent)
}

// msg is the message of key numbered n, keyed by key.
func (h heldPuts) msg(key string, n int) *runtime.Message[aggMsg] {
	return h.p.Message(aggMsg{Key: key, N: n}).PartitionKey(key)
}

func holdPuts(ctx context.Context, t *testing.T, key string, inFlightWait time.Duration, opts ...runtime.PublishOption) heldPuts {
	t.Helper()
	s := kinesistest.New()
	h := heldPuts{s: s, stream: createStream(ctx, t, s, 1), held: make(chan struct{})}
	release := make(chan struct{})
	var once sync.Once
	h.release = sync.OnceFunc(func() { close(release) })
	s.InjectPutFault(func(_, k string) error {
		if k == key {
			once.Do(func() { close(h.held) })
			<-release
		}
		return nil
	})
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	// Cleanups run last first: the held puts go before connect's Shutdown
	// waits for them.
	t.Cleanup(h.release)
	h.p = keyedPublisher{runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: h.stream},
		append([]runtime.PublishOption{runtime.WithAggregation(runtime.Aggregation{InFlightWait: inFlightWait})}, opts...)...)}
	return h
}
