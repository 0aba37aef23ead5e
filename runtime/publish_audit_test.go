package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// sentMsg is one acknowledged publish and its receipt.
type sentMsg struct {
	key string
	n   int
	r   runtime.Receipt
}

// publishWhile publishes messages 0, 1, ... of each key, one goroutine per
// key sending one after another through p, until stop is closed; it
// returns what was acknowledged. A publish that fails is an error.
func publishWhile(ctx context.Context, t *testing.T, p runtime.Publisher[aggMsg], keys []string, stop <-chan struct{}) *publishRun {
	run := &publishRun{}
	for _, k := range keys {
		run.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := p.Message(aggMsg{Key: k, N: n}).PartitionKey(k).Send(ctx)
				if err != nil {
					t.Errorf("publish %s/%d: %v", k, n, err)
					return
				}
				run.mu.Lock()
				run.sent = append(run.sent, sentMsg{k, n, r})
				run.mu.Unlock()
			}
		})
	}
	return run
}

// publishRun is publishWhile's publishing.
type publishRun struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	sent []sentMsg
}

// wait waits for the publishers to stop and returns what was acknowledged.
func (r *publishRun) wait() []sentMsg {
	r.wg.Wait()
	return r.sent
}

// awaitAcked waits until n messages have been acknowledged: a fixed sleep
// is not enough on a loaded machine.
func (r *publishRun) awaitAcked(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	for {
		r.mu.Lock()
		got := len(r.sent)
		r.mu.Unlock()
		if got >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d messages acknowledged, waiting for %d: %v", got, n, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// checkSent checks the stream against what was acknowledged: a reader
// that drops every aggregate holding a key of another shard reads each
// key's acknowledged messages once, in order, under its key, and nothing
// else; and each receipt names a copy of its message stored on the shard
// its key hashes to (at the receipt's sequence and sub-sequence number).
func checkSent(ctx context.Context, t *testing.T, api kinesisapi.API, stream string, sent []sentMsg) {
	t.Helper()
	msgs, _ := readMessages(ctx, t, api, stream)
	want := map[string]int{}
	for _, m := range sent {
		want[m.key] = max(want[m.key], m.n+1)
	}
	checkKeyed(t, msgs, want)
	l, err := shard.List(ctx, api, stream)
	if err != nil {
		t.Fatal(err)
	}
	type at struct {
		shard, seq string
		sub        int64
	}
	stored := map[at]storedMsg{}
	for _, m := range msgs {
		stored[at{m.shard, m.seq, m.sub}] = m
	}
	for _, m := range sent {
		got, ok := stored[at{m.r.ShardID, m.r.SequenceNumber, m.r.SubSequence}]
		info, _ := l.Shard(m.r.ShardID)
		switch {
		case !ok:
			t.Errorf("%s/%d: receipt %+v names no stored message", m.key, m.n, m.r)
		case got.Key != m.key || got.N != m.n || got.key != m.key || m.r.PartitionKey != m.key:
			t.Errorf("%s/%d: receipt %+v names %s/%d under %q", m.key, m.n, m.r, got.Key, got.N, got.key)
		case !info.Range.Contains(shard.HashKeyOf(m.key)):
			t.Errorf("%s/%d: receipt %+v names a shard its key does not hash to", m.key, m.n, m.r)
		}
	}
}

// TestAggregatedReshardBetweenARefusedPutAndItsRetry: every put is refused
// (throttled) for a while, so each shard's aggregates wait out backoffs;
// both shards are split meanwhile, and the refusals stop: the aggregates
// retried land on the children (their ExplicitHashKey was the parent's),
// and every acknowledged message is still read once, in order, on its
// key's shard, each receipt naming it there. The reshard tests without
// faults never have an aggregate retried across the split.
func TestAggregatedReshardBetweenARefusedPutAndItsRetry(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	var refuse atomic.Bool
	var refused atomic.Int64
	s.InjectPutFault(func(string, string) error {
		if refuse.Load() {
			refused.Add(1)
			return &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
		}
		return nil
	})
	logs := &syncBuffer{}
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries(),
		runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{MaxBytes: 2000}))
	stop := make(chan struct{})
	run := publishWhile(ctx, t, p, aggKeys(24), stop)
	run.awaitAcked(ctx, t, 24)
	refuse.Store(true)
	for refused.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	splitInHalf(ctx, t, s, stream, "shardId-000000000000")
	splitInHalf(ctx, t, s, stream, "shardId-000000000001")
	time.Sleep(20 * time.Millisecond)
	refuse.Store(false)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	sent := run.wait()
	checkSent(ctx, t, s, stream, sent)
	// Every put was refused from before the splits until after them: an
	// aggregate that landed on a child was sent to its parent and retried.
	if !strings.Contains(logs.String(), "landed on another shard") {
		t.Errorf("no aggregate retried across the split landed on a child; log:\n%s", logs)
	}
	t.Logf("%d messages acknowledged, %d puts refused", len(sent), refused.Load())
}

// TestAggregatedKeysOnAShardBoundary splits a stream while publishing so
// that one key's hash is exactly a child's starting hash key (the
// ExplicitHashKey of every aggregate of that child) and another's exactly
// its ending hash key: their messages, and their neighbours', are read
// once each, in order, on their own shard, each receipt naming it there.
// The other reshard tests split at the middle, where no key sits.
func TestAggregatedKeysOnAShardBoundary(t *testing.T) {
	s := kinesistest.New()
	testAggregatedKeysOnAShardBoundary(t, s, runtime.WithKinesisClient(s))
}

func TestAggregatedKeysOnAShardBoundaryKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testAggregatedKeysOnAShardBoundary(t, api, opts...)
}

func testAggregatedKeysOnAShardBoundary(t *testing.T, s kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, s, 1)
	keys := aggKeys(24)
	// Sorted by hash: first and last are neighbours in the middle.
	slices.SortFunc(keys, func(a, b string) int {
		ha, hb := shard.HashKeyOf(a), shard.HashKeyOf(b)
		if ha.Less(hb) {
			return -1
		}
		if hb.Less(ha) {
			return 1
		}
		return 0
	})
	first, last := keys[len(keys)/2], keys[len(keys)/2+1]
	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{Linger: time.Millisecond}))
	stop := make(chan struct{})
	run := publishWhile(ctx, t, p, keys, stop)
	split := func(id, at string) {
		if _, err := s.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: &stream, ShardToSplit: &id, NewStartingHashKey: &at}); err != nil {
			t.Fatalf("split %s at %s: %v", id, at, err)
		}
		waitActive(ctx, t, s, stream, " after a split")
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	// Shard 1 starts at first's hash; shard 2's first hash is last's plus one.
	split("shardId-000000000000", shard.HashKeyOf(first).String())
	end, _ := new(big.Int).SetString(shard.HashKeyOf(last).String(), 10)
	split("shardId-000000000002", end.Add(end, big.NewInt(1)).String())
	close(stop)
	sent := run.wait()
	checkSent(ctx, t, s, stream, sent)
	l, err := shard.List(ctx, s, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := l.Shard("shardId-000000000003")
	if info.StartingHashKey != shard.HashKeyOf(first).String() || info.EndingHashKey != shard.HashKeyOf(last).String() {
		t.Fatalf("shard 3 spans %s..%s, want exactly %s's and %s's hashes", info.StartingHashKey, info.EndingHashKey, first, last)
	}
	n := map[string]int{}
	for _, m := range sent {
		if m.r.ShardID == "shardId-000000000003" {
			n[m.key]++
		}
	}
	if n[first] == 0 || n[last] == 0 {
		t.Errorf("acknowledged on shard 3: %v; want messages of both boundary keys", n)
	}
}

// TestShutdownWithAStartAllBatchHalfInAnAggregate shuts the broker down
// while one StartAll batch's aggregate is held in flight and the next
// batch waits, some of it in the shard's open aggregate, some behind its
// keys' messages in flight: Shutdown returns once the held put does,
// every Wait returns, and each message's result is the truth: a receipt
// naming where it is stored, or an error and nothing stored.
// TestAggregatedShutdownUnderLoad checks only that what was acknowledged
// is stored.
func TestShutdownWithAStartAllBatchHalfInAnAggregate(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	s.InjectPutFault(func(_, key string) error {
		if key == "customer-000" {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream},
		runtime.WithAggregation(runtime.Aggregation{InFlightWait: time.Minute}))
	keys := aggKeys(10)
	var sent []sentMsg // in submission order, as the receipts come
	var pending []*runtime.Pending
	start := func(n int, keys []string) {
		msgs := make([]*runtime.Message[aggMsg], 0, len(keys))
		for _, k := range keys {
			msgs = append(msgs, p.Message(aggMsg{Key: k, N: n}).PartitionKey(k))
			sent = append(sent, sentMsg{key: k, n: n})
		}
		pending = append(pending, runtime.StartAll(ctx, msgs))
	}
	start(0, keys[:5]) // customer-000 first: its aggregate is held
	<-held
	for n := 1; n < 4; n++ {
		start(n, keys) // customer-000..004 behind their messages in flight, 005..009 in the open aggregate
	}
	shut := make(chan error, 1)
	go func() { shut <- b.Shutdown(ctx) }()
	// The shutdown has failed what was queued when the last batch, all of
	// it queued behind the held put, has its results (a fixed sleep here
	// was too short on a loaded machine).
	last := make(chan struct{})
	go func() { _, _ = pending[len(pending)-1].Wait(); close(last) }()
	select {
	case <-last:
	case <-ctx.Done():
		t.Fatal("the last batch still waits after Shutdown began")
	}
	releaseAll()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	var receipts []runtime.Receipt
	failed := map[string]bool{}
	for i, pd := range pending {
		r, err := pd.Wait()
		receipts = append(receipts, r...)
		if err != nil && !errors.Is(err, runtime.ErrNotConnected) {
			t.Errorf("batch %d: %v, want ErrNotConnected errors only", i, err)
		}
	}
	var acked []sentMsg
	for i, m := range sent {
		if receipts[i] == (runtime.Receipt{}) {
			failed[fmt.Sprint(m.key, "/", m.n)] = true
			continue
		}
		m.r = receipts[i]
		acked = append(acked, m)
	}
	stored := storedKeyN(ctx, t, s, stream)
	for _, m := range stored {
		if failed[m] {
			t.Errorf("%s is stored, and its Wait reported an error", m)
		}
	}
	if len(stored) != len(acked) {
		t.Errorf("stored %v; %d messages acknowledged", stored, len(acked))
	}
	checkSent(ctx, t, s, stream, acked)
	if len(acked) == 0 || len(failed) == 0 {
		t.Errorf("%d messages stored, %d failed: want both", len(acked), len(failed))
	}
}

// TestAggregateWhoseFirstMessageIsWithdrawnKeepsItsBound: an aggregate's
// record goes under its first message's key, and its messages are
// packed up to MaxBytes less that key. When that first message is
// withdrawn (its caller gave up) before the aggregate is sent, the next
// message's key heads the record; the record must still be within
// MaxBytes, data plus key (the service refuses a record over 1 MiB so
// counted, which with MaxBytes at its 1 MiB maximum would fail every
// message of the aggregate).
func TestAggregateWhoseFirstMessageIsWithdrawnKeepsItsBound(t *testing.T) {
	const maxBytes = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := holdPuts(ctx, t, "hot", time.Minute, runtime.WithAggregation(runtime.Aggregation{MaxBytes: maxBytes, InFlightWait: time.Minute}))
	hot := runtime.StartAll(ctx, []*runtime.Message[aggMsg]{h.msg("hot", 0)})
	<-h.held // the shard's aggregates now fill while hot 0's is in flight

	// "a" opens the shard's next aggregate, and is given up.
	aCtx, giveUp := context.WithCancel(ctx)
	first := runtime.StartAll(aCtx, []*runtime.Message[aggMsg]{h.msg("a", 0)})
	time.Sleep(20 * time.Millisecond) // routed into the open aggregate
	giveUp()
	checkNotSent(t, "the first message, given up", 1, first)

	// Messages of a 256-byte key fill the aggregate to its bound as packed
	// with "a" first (as the aggregator sized it); one more seals it.
	long := strings.Repeat("k", 256)
	var kb kpl.Builder
	data := func(m aggMsg) []byte { d, _ := json.Marshal(m); return d }
	kb.Add("a", data(aggMsg{Key: "a", N: 0}))
	limit := maxBytes - len("a")
	var msgs []*runtime.Message[aggMsg]
	for n := 0; ; n++ {
		m := aggMsg{Key: long, N: n, Pad: strings.Repeat("x", 300)}
		if kb.SizeWith(long, data(m)) > limit {
			// The largest pad that fits exactly, then one that cannot.
			for m.Pad = strings.Repeat("x", 300); len(m.Pad) > 0 && kb.SizeWith(long, data(m)) > limit; m.Pad = m.Pad[1:] {
			}
			kb.Add(long, data(m))
			msgs = append(msgs, h.p.Message(m).PartitionKey(long))
			msgs = append(msgs, h.msg(long, n+1))
			break
		}
		kb.Add(long, data(m))
		msgs = append(msgs, h.p.Message(m).PartitionKey(long))
	}
	// The full aggregate goes at once; the last message, in the next one,
	// waits for hot 0.
	pd := runtime.StartAll(ctx, msgs)
	time.Sleep(20 * time.Millisecond)
	h.release()
	if _, err := hot.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Wait(); err != nil {
		t.Errorf("publish of the 256-byte key: %v", err)
	}
	recs, err := h.s.Records(h.stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if n := len(r.Data) + len(aws.ToString(r.PartitionKey)); kpl.IsAggregated(r.Data) && n > maxBytes {
			t.Errorf("aggregate of %d bytes with its key %.8s..., over the %d-byte bound", n, aws.ToString(r.PartitionKey), maxBytes)
		}
	}
	stored := storedKeyN(ctx, t, h.s, h.stream)
	if slices.Contains(stored, "a/0") {
		t.Errorf("stored %v: the message given up is among them", stored)
	}
}

// TestAggregatedPublishWhoseListingIsRefused: an aggregating publisher
// lists the shards before it routes anything. When the service refuses
// that listing for good (an identity allowed to put records but not to
// list shards, or a stream name it rejects), each publish fails at once
// with the refusal (ErrPublish, and ErrAccess for an access refusal), as
// a refused PutRecords does, instead of waiting out its ctx, with none for
// ever, while the refusals showed only as warnings; nothing is put, and
// once the listing is allowed the publisher works.
func TestAggregatedPublishWhoseListingIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		access bool
	}{
		{"access denied", &types.AccessDeniedException{Message: aws.String("not authorized to perform: kinesis:ListShards")}, true},
		{"invalid argument", &types.InvalidArgumentException{Message: aws.String("injected")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 2)
			var refuse atomic.Bool
			refuse.Store(true)
			s.InjectCallFault(func(c kinesistest.Call) error {
				if c.Op == kinesistest.OpListShards && refuse.Load() {
					return tc.err
				}
				return nil
			})
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
			for n := range 2 { // the first publish, and one after the refusal
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := p.Publish(pctx, aggMsg{Key: "k", N: n})
				cancel()
				if !errors.Is(err, runtime.ErrPublish) || errors.Is(err, runtime.ErrAccess) != tc.access ||
					errors.Is(err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(err), "ListShards") {
					t.Errorf("publish %d: %v; want ErrPublish with the listing's refusal (ErrAccess: %v), at once", n, err, tc.access)
				}
			}
			if n := s.Calls(kinesistest.OpPutRecords); n != 0 {
				t.Errorf("%d PutRecords calls, want none: nothing could be routed", n)
			}
			refuse.Store(false)
			if err := p.Publish(ctx, aggMsg{Key: "k", N: 2}); err != nil {
				t.Fatalf("publish once the listing is allowed: %v", err)
			}
			if got := storedKeyN(ctx, t, s, stream); !slices.Equal(got, []string{"k/2"}) {
				t.Errorf("stored %v, want [k/2]", got)
			}
		})
	}
}

// TestSendAllReceiptsUnderThrottling: two of every three attempts of each
// record are refused (throttled) while five rounds of 30 keys go out in
// one SendAll: each key's messages are stored once, in order, and each
// receipt names where its message is stored, plain or aggregated (a
// retried aggregate's messages get the receipt of the attempt that
// stored it). The receipt tests ran without faults.
func TestSendAllReceiptsUnderThrottling(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 4)
			throttleTwoOfThree(s)
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: agg})
			keys := aggKeys(30)
			var msgs []*runtime.Message[aggMsg]
			for n := range 5 {
				for _, k := range keys {
					msgs = append(msgs, p.Message(aggMsg{Key: k, N: n}).PartitionKey(k))
				}
			}
			receipts, err := runtime.SendAll(ctx, msgs)
			if err != nil {
				t.Fatalf("SendAll: %v", err)
			}
			checkRounds(ctx, t, s, stream, keys, receipts)
		})
	}
}

// TestAggregatedMergeWhilePublishingReceipts merges the two shards of a
// stream while 24 keys publish, the puts in flight held until after the
// merge: the aggregates sent to a parent land on the child, which holds all their keys, and stand (not sent again), with
// the receipt of where they landed: every acknowledged message is read
// once, in order, and each receipt names it on its key's shard.
// TestAggregatedMergeWhilePublishing does not check receipts.
func TestAggregatedMergeWhilePublishingReceipts(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	// The puts that arrive while gate is set wait for it: they were sent
	// before the merge and are stored after it.
	var gate atomic.Pointer[chan struct{}]
	var held atomic.Int64
	s.InjectPutFault(func(string, string) error {
		if g := gate.Load(); g != nil {
			held.Add(1)
			<-*g
		}
		return nil
	})
	logs := &syncBuffer{}
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{Linger: 2 * time.Millisecond}))
	stop := make(chan struct{})
	run := publishWhile(ctx, t, p, aggKeys(24), stop)
	run.awaitAcked(ctx, t, 24)
	g := make(chan struct{})
	gate.Store(&g)
	for held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	mergeBoth(ctx, t, s, stream, nil)
	gate.Store(nil)
	close(g)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	sent := run.wait()
	checkSent(ctx, t, s, stream, sent)
	merged := 0
	for _, m := range sent {
		if m.r.ShardID == "shardId-000000000002" {
			merged++
		}
	}
	if merged == 0 || merged == len(sent) {
		t.Errorf("%d of %d messages acknowledged on the merged shard: want some before the merge and some after", merged, len(sent))
	}
	if !strings.Contains(logs.String(), "landed on another shard") {
		t.Errorf("no aggregate sent before the merge landed on the child; log:\n%s", logs)
	}
}

// TestDeadlinesAcrossRetriesAreTruthful publishes 300 messages, each of
// its own key and each with a deadline of 0 to 15 ms, while the first
// two attempts of every record are refused (throttled) and the retries
// come within milliseconds: deadlines end before a message is sent, in a
// backoff, as a backoff ends, and in flight. Whatever the moment, each
// result is the truth: nil with a receipt naming the stored message; an
// error that does not say the message may have been written, and nothing
// stored; or "may have been written". Plain and aggregated.
func TestDeadlinesAcrossRetriesAreTruthful(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 2)
			var mu sync.Mutex
			attempts := map[string]int{}
			s.InjectPutFault(func(_, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if attempts[key]++; attempts[key] <= 2 {
					return &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
				}
				return nil
			})
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{InFlightWait: -1}))
			if !agg {
				p = runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream})
			}
			keys := aggKeys(300)
			type result struct {
				r   runtime.Receipt
				err error
			}
			results := make([]result, len(keys))
			var wg sync.WaitGroup
			for i, k := range keys {
				wg.Go(func() {
					mctx, cancel := context.WithTimeout(ctx, time.Duration(i%16)*time.Millisecond)
					defer cancel()
					r, err := p.Message(aggMsg{Key: k}).PartitionKey(k).Send(mctx)
					results[i] = result{r, err}
				})
			}
			wg.Wait()
			// Let whatever is still on its way (an aggregate whose callers
			// gave up while it was in flight) land before reading.
			if err := p.Message(aggMsg{Key: "last"}).PartitionKey("last").Publish(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			count := map[string]int{}
			for _, res := range results {
				switch {
				case res.err == nil:
					count["stored"]++
				case errors.Is(res.err, runtime.ErrMayBeStored):
					count["may have been written"]++
				default:
					count["not written"]++
				}
			}
			msgs, _ := readMessages(ctx, t, s, stream)
			stored := map[string][]storedMsg{}
			for _, m := range msgs {
				stored[m.Key] = append(stored[m.Key], m)
			}
			for i, res := range results {
				k, at := keys[i], stored[keys[i]]
				switch {
				case len(at) > 1:
					t.Errorf("%s stored %d times", k, len(at))
				case res.err == nil && (len(at) != 1 || at[0].shard != res.r.ShardID || at[0].seq != res.r.SequenceNumber ||
					at[0].sub != res.r.SubSequence || at[0].key != k || res.r.PartitionKey != k):
					t.Errorf("%s: receipt %+v; stored %+v", k, res.r, at)
				case res.err != nil && !errors.Is(res.err, runtime.ErrMayBeStored) && len(at) != 0:
					t.Errorf("%s: %v; and it is stored", k, res.err)
				}
			}
			t.Logf("results: %v", count)
		})
	}
}

// TestShutdownUnderThrottlingIsTruthful shuts the broker down while 64
// keys publish without pause and every record's first two attempts are
// refused (throttled): records queued, in a backoff and in flight when
// it comes. Each result is the truth: nil with the stored message's
// receipt, or an error and nothing stored (unless it says the message
// may have been written); each key's stored messages are a prefix of
// what it published, in order. Plain and aggregated.
// TestAggregatedShutdownUnderLoad has no refusals and checks only what
// was acknowledged.
func TestShutdownUnderThrottlingIsTruthful(t *testing.T) {
	for _, agg := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", agg), func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 2)
			throttleTwoOfThree(s)
			b := runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries())
			if err := b.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			var opts []runtime.PublishOption
			if agg {
				opts = append(opts, runtime.WithAggregation(runtime.Aggregation{}))
			}
			p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, opts...)
			type result struct {
				n   int
				r   runtime.Receipt
				err error
			}
			keys := aggKeys(64)
			results := make([][]result, len(keys))
			var wg sync.WaitGroup
			var acks atomic.Int64
			for i, k := range keys {
				wg.Go(func() {
					for n := 0; ; n++ {
						r, err := p.Message(aggMsg{Key: k, N: n}).PartitionKey(k).Send(ctx)
						results[i] = append(results[i], result{n, r, err})
						if err != nil {
							return
						}
						acks.Add(1)
					}
				})
			}
			// Shut down while sends are under way, once some have landed
			// (a fixed sleep was too short on a loaded machine).
			for start := time.Now(); acks.Load() == 0 && time.Since(start) < 10*time.Second; {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			if err := b.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			msgs, _ := readMessages(ctx, t, s, stream)
			stored := map[string][]storedMsg{}
			for _, m := range msgs {
				stored[m.Key] = append(stored[m.Key], m)
			}
			acked := 0
			for i, k := range keys {
				res, at := results[i], stored[k]
				for j, m := range at {
					if m.N != j {
						t.Errorf("%s: stored %d as its message %d", k, m.N, j)
					}
				}
				for _, r := range res {
					switch {
					case r.err == nil:
						acked++
						if r.n >= len(at) || at[r.n].seq != r.r.SequenceNumber || at[r.n].shard != r.r.ShardID || at[r.n].sub != r.r.SubSequence {
							t.Errorf("%s/%d: receipt %+v, not where it is stored", k, r.n, r.r)
						}
					case !errors.Is(r.err, runtime.ErrNotConnected):
						t.Errorf("%s/%d: %v, want ErrNotConnected", k, r.n, r.err)
					case !errors.Is(r.err, runtime.ErrMayBeStored) && r.n < len(at):
						t.Errorf("%s/%d: %v; and it is stored", k, r.n, r.err)
					}
				}
			}
			if acked == 0 {
				t.Error("nothing was stored before the shutdown")
			}
		})
	}
}

// TestShutdownAfterAMergeUnderAnAggregateInFlight: an aggregate sent to a
// shard is held while its shard is merged with the other, then lands on
// the merged child; Shutdown comes either before it lands or while it
// waits for the listing that would say whether it stands (refused here).
// The publisher cannot list the shards any more to learn that the child
// holds every key of it, so its caller gets ErrNotConnected; but the
// message is stored and will be read, so the error must say where it
// landed rather than read as "not connected" alone.
func TestShutdownAfterAMergeUnderAnAggregateInFlight(t *testing.T) {
	for _, listingRefused := range []bool{false, true} {
		t.Run(fmt.Sprintf("listing refused=%v", listingRefused), func(t *testing.T) {
			testShutdownAfterAMergeUnderAnAggregateInFlight(t, listingRefused)
		})
	}
}

func testShutdownAfterAMergeUnderAnAggregateInFlight(t *testing.T, listingRefused bool) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	s.InjectPutFault(func(_, key string) error {
		if key == "customer-000" {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	b := runtime.NewBroker(runtime.WithKinesisClient(s))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})
	r := make(chan error, 1)
	go func() { r <- p.Message(aggMsg{Key: "customer-000"}).PartitionKey("customer-000").Publish(ctx) }()
	<-held
	if _, err := s.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: &stream,
		ShardToMerge: aws.String("shardId-000000000000"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, s, stream, " after a merge")
	shut := make(chan error, 1)
	if listingRefused {
		var listings atomic.Int32
		s.InjectCallFault(func(c kinesistest.Call) error {
			if c.Op == kinesistest.OpListShards {
				listings.Add(1)
				return &types.LimitExceededException{Message: aws.String("injected")}
			}
			return nil
		})
		releaseAll()
		for listings.Load() == 0 { // landed, and waiting for a listing
			time.Sleep(5 * time.Millisecond)
		}
		go func() { shut <- b.Shutdown(context.Background()) }()
	} else {
		go func() { shut <- b.Shutdown(context.Background()) }()
		time.Sleep(50 * time.Millisecond)
		releaseAll()
	}
	<-shut
	err := <-r
	s.InjectCallFault(nil)
	got := storedKeyN(ctx, t, s, stream)
	t.Logf("publish: %v; stored %v", err, got)
	if len(got) != 1 {
		t.Fatalf("stored %v, want the one message (on the merged child)", got)
	}
	if err != nil && (!errors.Is(err, runtime.ErrNotConnected) || !errors.Is(err, runtime.ErrMayBeStored) || !strings.Contains(err.Error(), "landed on shard shardId-000000000002")) {
		t.Errorf("publish stored on the merged child failed with %v, want ErrNotConnected and ErrMayBeStored, saying it landed on shardId-000000000002", err)
	}
}
