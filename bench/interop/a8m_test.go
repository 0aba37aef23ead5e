package interop

// Aggregates written by a8m/kinesis-producer, read by a kinesisgen
// subscriber. The producer is the module itself (github.com/a8m/kinesis-producer
// v0.2.0, the newest version the module proxy serves here: v0.3.0 and later
// are refused), its Producer driven through its public API; nothing of its
// output is hand-made. Its aggregator (aggregator.go, Aggregator.Put and
// Drain, unchanged in its newest source) writes a shape worth knowing:
//
//   - the partition key table holds one key, the first message's, and every
//     user record's partition_key_index is 0: each message of an aggregate
//     reads back under the key of the aggregate's first message, whatever
//     key it was put with;
//   - no explicit_hash_key_table and no explicit_hash_key_index;
//   - the Kinesis record goes under that first key with no ExplicitHashKey,
//     so the service files the whole aggregate on the first key's shard.
//
// So a consumer can only deliver each user record under the key the
// aggregate names for it; the tests check that a kinesisgen subscriber
// does (and that AWS's deaggregator reads the same keys), delivers every
// user record once, in order within its aggregate, and checkpoints inside
// an aggregate, at the sub-sequence number, resuming after the last
// settled user record.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"sync"
	"testing"
	"time"

	producer "github.com/a8m/kinesis-producer"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	awsv1 "github.com/aws/aws-sdk-go/aws"
	credv1 "github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/session"
	kinesisv1 "github.com/aws/aws-sdk-go/service/kinesis"
	"github.com/awslabs/kinesis-aggregation/go/v2/deaggregator"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// a8mBackend is where a test runs: a Kinesis API for the subscriber and
// the checks, and a producer.Putter for a8m's producer.
type a8mBackend struct {
	api    kinesisapi.API
	putter producer.Putter
	broker func(opts ...runtime.Option) *runtime.Broker
}

// inProcessA8m runs a8m's producer against the in-process backend, through
// an adapter from its SDK v1 PutRecords to the backend's.
func inProcessA8m() a8mBackend {
	s := kinesistest.New()
	return a8mBackend{api: s, putter: v1Adapter{s}, broker: func(opts ...runtime.Option) *runtime.Broker {
		return runtime.NewBroker(append([]runtime.Option{runtime.WithKinesisClient(s)}, opts...)...)
	}}
}

// kinesaliteA8m runs a8m's producer with its own SDK v1 client against
// kinesalite.
func kinesaliteA8m(t *testing.T) a8mBackend {
	url := livetest.KinesisEndpoint(t)
	api := kinesis.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
	sess := session.Must(session.NewSession(&awsv1.Config{
		Region: awsv1.String("us-east-1"), Endpoint: awsv1.String(url), DisableSSL: awsv1.Bool(true),
		Credentials: credv1.NewStaticCredentials("x", "x", ""),
	}))
	return a8mBackend{api: api, putter: kinesisv1.New(sess), broker: func(opts ...runtime.Option) *runtime.Broker {
		return runtime.NewBroker(append([]runtime.Option{runtime.WithEndpoint(url), runtime.WithRegion("us-east-1"), runtime.WithTestCredentials()}, opts...)...)
	}}
}

// v1Adapter is a producer.Putter over a v2-shaped Kinesis API.
type v1Adapter struct{ api kinesisapi.API }

func (a v1Adapter) PutRecords(in *kinesisv1.PutRecordsInput) (*kinesisv1.PutRecordsOutput, error) {
	v2 := &kinesis.PutRecordsInput{StreamName: in.StreamName}
	for _, r := range in.Records {
		v2.Records = append(v2.Records, types.PutRecordsRequestEntry{Data: r.Data, PartitionKey: r.PartitionKey, ExplicitHashKey: r.ExplicitHashKey})
	}
	out, err := a.api.PutRecords(context.Background(), v2)
	if err != nil {
		return nil, err
	}
	res := &kinesisv1.PutRecordsOutput{FailedRecordCount: awsv1.Int64(int64(aws.ToInt32(out.FailedRecordCount)))}
	for _, r := range out.Records {
		res.Records = append(res.Records, &kinesisv1.PutRecordsResultEntry{ShardId: r.ShardId, SequenceNumber: r.SequenceNumber, ErrorCode: r.ErrorCode, ErrorMessage: r.ErrorMessage})
	}
	return res, nil
}

// recorder keeps a copy of every entry a8m's producer puts.
type recorder struct {
	next producer.Putter
	mu   sync.Mutex
	sent []kinesisv1.PutRecordsRequestEntry
}

func (r *recorder) PutRecords(in *kinesisv1.PutRecordsInput) (*kinesisv1.PutRecordsOutput, error) {
	r.mu.Lock()
	for _, e := range in.Records {
		r.sent = append(r.sent, *e)
	}
	r.mu.Unlock()
	return r.next.PutRecords(in)
}

type a8mMsg struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// a8mProduce puts msgs, each under its Key, through a8m's Producer, at most
// perAggregate messages per aggregate, and stops it (which flushes). It
// returns the entries the producer put.
func a8mProduce(t *testing.T, putter producer.Putter, stream string, msgs []a8mMsg, perAggregate int) []kinesisv1.PutRecordsRequestEntry {
	t.Helper()
	rec := &recorder{next: putter}
	p := producer.New(&producer.Config{
		StreamName:          stream,
		Client:              rec,
		AggregateBatchCount: perAggregate,
		FlushInterval:       time.Hour, // Stop flushes
		Logger:              &producer.StdLogger{Logger: log.New(io.Discard, "", 0)},
	})
	failures := p.NotifyFailures()
	p.Start()
	for _, m := range msgs {
		data, _ := json.Marshal(m)
		if err := p.Put(data, m.Key); err != nil {
			t.Fatalf("a8m Put: %v", err)
		}
	}
	p.Stop()
	for f := range failures {
		t.Errorf("a8m failed to put a record of key %s: %v", f.PartitionKey, f)
	}
	return rec.sent
}

func TestSubscriberReadsA8mAggregatesInProcess(t *testing.T) {
	testSubscriberReadsA8mAggregates(t, inProcessA8m())
}

func TestSubscriberReadsA8mAggregatesKinesalite(t *testing.T) {
	testSubscriberReadsA8mAggregates(t, kinesaliteA8m(t))
}

// testSubscriberReadsA8mAggregates puts 60 messages of 6 keys through a8m's
// producer, 20 per aggregate, into a 4-shard stream, checks the shape it
// wrote (above), and reads the stream with a kinesisgen subscriber: every
// user record once, under the key its aggregate names for it (the one
// AWS's deaggregator reads too), on that key's shard, and each aggregate's
// records in order.
func testSubscriberReadsA8mAggregates(t *testing.T, be a8mBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := newStream(ctx, t, be.api, 4)
	var msgs []a8mMsg
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for n := range 60 {
		msgs = append(msgs, a8mMsg{Key: keys[n%len(keys)], N: n})
	}
	sent := a8mProduce(t, be.putter, stream, msgs, 20)

	// The shape: three aggregates, each under its first message's key, no
	// ExplicitHashKey, one key in its table.
	if len(sent) != 3 {
		t.Fatalf("a8m put %d records, want 3 aggregates of 20", len(sent))
	}
	keyOf := map[int]string{} // message → the key its aggregate names for it
	for _, e := range sent {
		if e.ExplicitHashKey != nil {
			t.Errorf("a8m set ExplicitHashKey %s", *e.ExplicitHashKey)
		}
		subs, ok, err := kpl.Deaggregate(e.Data)
		if !ok || err != nil || len(subs) != 20 {
			t.Fatalf("a8m record: aggregated %v, %d user records, %v", ok, len(subs), err)
		}
		var first a8mMsg
		_ = json.Unmarshal(subs[0].Data, &first)
		if aws.ToString(e.PartitionKey) != first.Key {
			t.Errorf("aggregate filed under %q, its first message's key is %q", aws.ToString(e.PartitionKey), first.Key)
		}
		for _, s := range subs {
			var m a8mMsg
			_ = json.Unmarshal(s.Data, &m)
			if s.PartitionKey != first.Key {
				t.Errorf("message %d of key %s: the aggregate names key %q, want a8m's first key %q", m.N, m.Key, s.PartitionKey, first.Key)
			}
			keyOf[m.N] = s.PartitionKey
		}
		// AWS's deaggregator reads the same keys.
		theirs, err := deaggregator.DeaggregateRecords([]types.Record{{Data: e.Data, PartitionKey: e.PartitionKey, SequenceNumber: aws.String("1")}})
		if err != nil || len(theirs) != len(subs) {
			t.Fatalf("AWS deaggregator: %d records, %v", len(theirs), err)
		}
		for i := range theirs {
			if aws.ToString(theirs[i].PartitionKey) != subs[i].PartitionKey {
				t.Errorf("user record %d: AWS reads key %q, kpl %q", i, aws.ToString(theirs[i].PartitionKey), subs[i].PartitionKey)
			}
		}
	}

	type got struct {
		m       a8mMsg
		key, sh string
		seq     string
	}
	seen := make(chan got, len(msgs))
	b := be.broker()
	if _, err := runtime.Subscribe(b, stream, func(_ context.Context, m a8mMsg, d runtime.Delivery) runtime.Outcome {
		seen <- got{m, d.PartitionKey, d.ShardID, d.SequenceNumber}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	l, err := shard.List(ctx, be.api, stream)
	if err != nil {
		t.Fatal(err)
	}
	delivered := map[int]bool{}
	lastInRecord := map[string]int{} // "shard sequence" -> last message delivered from that record
	for range msgs {
		select {
		case g := <-seen:
			if delivered[g.m.N] {
				t.Errorf("message %d delivered twice", g.m.N)
			}
			delivered[g.m.N] = true
			if g.key != keyOf[g.m.N] {
				t.Errorf("message %d delivered under %q, its aggregate names %q", g.m.N, g.key, keyOf[g.m.N])
			}
			if info, _ := l.Shard(g.sh); !info.Range.Contains(shard.HashKeyOf(g.key)) {
				t.Errorf("message %d delivered from %s, which %q does not hash to", g.m.N, g.sh, g.key)
			}
			rec := g.sh + " " + g.seq // sequence numbers are unique only within a shard
			if prev, ok := lastInRecord[rec]; ok && prev > g.m.N {
				t.Errorf("record %s: message %d delivered after %d", rec, g.m.N, prev)
			}
			lastInRecord[rec] = g.m.N
		case <-ctx.Done():
			t.Fatalf("delivered %d of %d user records", len(delivered), len(msgs))
		}
	}
	if len(lastInRecord) != 3 {
		t.Errorf("messages delivered from %d Kinesis records, want the 3 aggregates", len(lastInRecord))
	}
}

func TestA8mAggregateRestartInsideInProcess(t *testing.T) {
	testA8mRestartInside(t, inProcessA8m())
}

func TestA8mAggregateRestartInsideKinesalite(t *testing.T) {
	testA8mRestartInside(t, kinesaliteA8m(t))
}

// testA8mRestartInside: a8m packs 50 messages into one aggregate; a first
// subscriber settles 0..19 and is stopped while 20 is unsettled; a second
// broker on the same lease store resumes inside the aggregate, at 20 (the
// checkpoint holds the sub-sequence number), not at its start.
func testA8mRestartInside(t *testing.T, be a8mBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := newStream(ctx, t, be.api, 1)
	var msgs []a8mMsg
	for n := range 50 {
		msgs = append(msgs, a8mMsg{Key: "alice", N: n})
	}
	if sent := a8mProduce(t, be.putter, stream, msgs, 0); len(sent) != 1 {
		t.Fatalf("a8m put %d records, want one aggregate", len(sent))
	}

	store := lease.NewMemory()
	broker := func(owner string, opts ...runtime.Option) *runtime.Broker {
		return be.broker(append([]runtime.Option{runtime.WithLeaseStore(store), runtime.WithOwnerID(owner),
			runtime.WithCheckpointInterval(50 * time.Millisecond), runtime.WithFailoverTime(time.Minute)}, opts...)...)
	}
	handled := make(chan int, 64)
	stuck := make(chan struct{})
	b1 := broker("first", runtime.WithShutdownTimeout(300*time.Millisecond))
	if _, err := runtime.Subscribe(b1, stream, func(ctx context.Context, m a8mMsg, _ runtime.Delivery) runtime.Outcome {
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
	if _, err := runtime.Subscribe(b2, stream, func(_ context.Context, m a8mMsg, d runtime.Delivery) runtime.Outcome {
		again <- m.N
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	if err := b2.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b2.Shutdown(context.Background())
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

// newStream creates a stream of n shards with a unique name and waits
// until it is active.
func newStream(ctx context.Context, t *testing.T, api kinesisapi.API, n int32) string {
	t.Helper()
	name := fmt.Sprintf("a8m-%d", time.Now().UnixNano())
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: &n}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s never became active: %v", name, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
