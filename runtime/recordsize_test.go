package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// blobCodec publishes []byte messages as they are, to size records exactly.
type blobCodec struct{}

func (blobCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (blobCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

// sizedStream creates a stream of shards taking records of up to kib KiB
// (0: the service's default).
func sizedStream(ctx context.Context, t *testing.T, api kinesisapi.API, base string, kib int32) string {
	t.Helper()
	name := uniqueName(base)
	in := &kinesis.CreateStreamInput{StreamName: &name, ShardCount: aws.Int32(1)}
	if kib != 0 {
		in.MaxRecordSizeInKiB = &kib
	}
	if _, err := api.CreateStream(ctx, in); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	waitActive(ctx, t, api, name, "")
	return name
}

// putSizes records the data plus keys of each PutRecords call.
type putSizes struct {
	kinesisapi.API
	mu    sync.Mutex
	sizes []int
}

func (p *putSizes) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, o ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	n := 0
	for _, r := range in.Records {
		n += len(r.Data) + len(aws.ToString(r.PartitionKey))
	}
	p.mu.Lock()
	p.sizes = append(p.sizes, n)
	p.mu.Unlock()
	return p.API.PutRecords(ctx, in, o...)
}

// Issue 31, item 2, in process and over the HTTP server (the SDK's wire):
// a publisher learns each stream's MaxRecordSizeInKiB and takes records up
// to it; a record over it is an ErrPublish naming the stream's limit,
// before any call; a 10 MiB stream's records are read back whole by a
// subscriber; requests are packed within 10 MiB.
func TestLargeRecordsPerStream(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testLargeRecords(t, kinesistest.New(kinesistest.WithLongPoll(time.Second)), nil) })
	t.Run("HTTP", func(t *testing.T) {
		s := kinesistest.New(kinesistest.WithLongPoll(time.Second))
		h := kinesistest.NewHTTPServer(s)
		t.Cleanup(h.Close)
		testLargeRecords(t, h.Client(), s)
	})
}

func testLargeRecords(t *testing.T, api kinesisapi.API, backend *kinesistest.Server) {
	if backend == nil {
		backend = api.(*kinesistest.Server)
	}
	ctx := testContext(t, 120*time.Second)
	big := sizedStream(ctx, t, api, "big-", 10240)
	small := sizedStream(ctx, t, api, "small-", 0)
	sizes := &putSizes{API: api}
	// The race detector makes a 10 MiB call over HTTP take seconds.
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(sizes), runtime.WithCodec(blobCodec{}), runtime.WithPublishCallTimeout(time.Minute)))
	const key = "k"

	pSmall := runtime.NewPublisher[[]byte](b, runtime.PublisherSpec{Stream: small, PartitionKey: key})
	calls := backend.Calls(kinesistest.OpPutRecords)
	err := pSmall.Publish(ctx, make([]byte, 2<<20))
	var e *runtime.Error
	if !errors.Is(err, runtime.ErrPublish) || !errors.As(err, &e) || !strings.Contains(err.Error(), "1048576-byte limit of stream "+small) || !strings.Contains(err.Error(), "MaxRecordSizeInKiB 1024") {
		t.Fatalf("2 MiB on a 1 MiB stream: %v; want ErrPublish naming the stream's 1 MiB limit", err)
	}
	if err := pSmall.Publish(ctx, make([]byte, runtime.MaxRecordSize-len(key))); err != nil {
		t.Fatalf("1 MiB exactly on a 1 MiB stream: %v", err)
	}

	pBig := runtime.NewPublisher[[]byte](b, runtime.PublisherSpec{Stream: big, PartitionKey: key})
	err = pBig.Publish(ctx, make([]byte, runtime.MaxLargeRecordSize-len(key)+1))
	if !errors.Is(err, runtime.ErrPublish) || !strings.Contains(err.Error(), "10485760-byte limit") {
		t.Fatalf("one byte over 10 MiB: %v; want ErrPublish naming the 10 MiB limit", err)
	}
	if n := backend.Calls(kinesistest.OpPutRecords); n != calls+1 {
		t.Fatalf("%d PutRecords calls for one record within the limit and two over it; want 1", n-calls)
	}

	sub := newEnvWith(t, backend)
	sb := sub.broker(runtime.WithKinesisClient(api), runtime.WithCodec(blobCodec{}))
	var mu sync.Mutex
	var got [][]byte
	mustSubscribe(sub, sb, big, func(_ context.Context, m []byte, _ runtime.Delivery) runtime.Outcome {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	sub.connect(sb)

	// 10 MiB exactly, then four of 3 MiB at once (keys of their own): at
	// most three to a call.
	want := [][]byte{fill(runtime.MaxLargeRecordSize-len(key), 'a')}
	if err := pBig.Publish(ctx, want[0]); err != nil {
		t.Fatalf("10 MiB exactly on a 10 MiB stream: %v", err)
	}
	sizes.mu.Lock()
	sizes.sizes = nil
	sizes.mu.Unlock()
	batch := make([][]byte, 4)
	for i := range batch {
		batch[i] = fill(3<<20, byte('b'+i))
	}
	pAny := runtime.NewPublisher[[]byte](b, runtime.PublisherSpec{Stream: big})
	if err := runtime.PublishAll(ctx, pAny, batch); err != nil {
		t.Fatalf("PublishAll of 3 MiB records: %v", err)
	}
	want = append(want, batch...)
	sizes.mu.Lock()
	for _, n := range sizes.sizes {
		if n > 10<<20 {
			t.Errorf("a PutRecords call of %d bytes, over the 10 MiB request limit", n)
		}
	}
	if len(sizes.sizes) > 2 {
		t.Errorf("%d calls for four records of 3 MiB; want them packed up to three to a 10 MiB request", len(sizes.sizes))
	}
	sizes.mu.Unlock()

	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d large records", n, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// One shard: read in publish order, but the batch's records have no
	// common key, so they may be stored in any order.
	byFirst := map[byte]int{}
	for _, g := range got {
		if len(g) > 0 && g[0] == g[len(g)-1] {
			byFirst[g[0]] = len(g)
		}
	}
	for i, w := range want {
		if byFirst[w[0]] != len(w) {
			t.Errorf("record %d of %d bytes of %q read as %d bytes", i, len(w), w[:1], byFirst[w[0]])
		}
	}
}

func fill(n int, c byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// Issue 31, item 2: create_if_missing with max_record_size creates the
// stream and its dead-letter stream taking records of that size; a poison
// record of 3 MiB reaches the dead-letter stream whole. Without
// create_if_missing, or out of range, the option is ErrInvalid.
func TestMaxRecordSizeOnCreate(t *testing.T) {
	e := newEnv(t)
	stream, dl := e.stream("large"), e.stream("large-dl")
	noop := func(context.Context, []byte, runtime.Delivery) runtime.Outcome { return runtime.Ack() }
	for _, opts := range [][]runtime.SubscribeOption{
		{runtime.MaxRecordSizeKiB(4096)},
		{runtime.CreateIfMissing(1), runtime.MaxRecordSizeKiB(1023)},
		{runtime.CreateIfMissing(1), runtime.MaxRecordSizeKiB(10241)},
	} {
		if _, err := subscribe(e, e.broker(), stream, noop, opts...); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("Subscribe: %v; want ErrInvalid", err)
		}
	}

	b := e.broker(runtime.WithCodec(blobCodec{}))
	mustSubscribe(e, b, stream, func(context.Context, []byte, runtime.Delivery) runtime.Outcome {
		return runtime.Reject(errors.New("poison"))
	},
		runtime.CreateIfMissing(1), runtime.MaxRecordSizeKiB(4096), runtime.DeadLetter(dl), runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	for _, name := range []string{stream, dl} {
		out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
		if err != nil {
			t.Fatal(err)
		}
		if n := aws.ToInt32(out.StreamDescriptionSummary.MaxRecordSizeInKiB); n != 4096 {
			t.Errorf("stream %s created with MaxRecordSizeInKiB %d; want 4096", name, n)
		}
	}
	pb := e.broker(runtime.WithCodec(blobCodec{}))
	e.connect(pb)
	poison := fill(3<<20, 'p')
	if err := runtime.NewPublisher[[]byte](pb, runtime.PublisherSpec{Stream: stream, PartitionKey: "k"}).Publish(e.ctx, poison); err != nil {
		t.Fatalf("publish 3 MiB: %v", err)
	}
	srv := e.api.(*kinesistest.Server)
	for {
		recs, err := srv.Records(dl)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 0 {
			h, payload, err := runtime.DecodeRecord(recs[0].Data)
			if err != nil {
				t.Fatal(err)
			}
			if len(payload) != len(poison) || h[runtime.TruncatedFromHeader] != "" {
				t.Fatalf("dead letter of %d bytes (truncated from %q); want the whole 3 MiB", len(payload), h[runtime.TruncatedFromHeader])
			}
			return
		}
		if e.ctx.Err() != nil {
			t.Fatal("no dead letter")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 31, item 2: an aggregating publisher keeps its aggregates within
// their own bound (at most 1 MiB) on a 10 MiB stream; a message too large
// for an aggregate goes plain, up to the stream's size.
func TestAggregatedLargeMessageGoesPlain(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := sizedStream(ctx, t, s, "agg-large-", 10240)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
	batch := []aggMsg{{Key: "k", N: 0}, {Key: "k", N: 1, Pad: strings.Repeat("x", 5<<20)}, {Key: "k", N: 2}, {Key: "k", N: 3}}
	if err := runtime.PublishAll(ctx, p, batch); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	msgs, _ := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, map[string]int{"k": len(batch)})
	for _, m := range msgs {
		if (m.N == 1) == m.aggregated {
			t.Errorf("message %d: aggregated=%v; want only the 5 MiB one plain", m.N, m.aggregated)
		}
	}
}

// TestLargeRequestOnOldBackendKinesalite: kinesalite still takes 5 MiB a
// request and names no MaxRecordSizeInKiB. A 2 MiB record is refused
// before I/O under the 1 MiB default; eight records of about 1 MiB packed
// into one 8 MiB request, which kinesalite refuses whole, are sent again
// in halves and all stored.
func TestLargeRequestOnOldBackendKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	ctx := testContext(t, 60*time.Second)
	stream := createStream(ctx, t, api, 1)
	b := connect(ctx, t, runtime.NewBroker(append(opts, runtime.WithCodec(blobCodec{}))...))
	p := runtime.NewPublisher[[]byte](b, runtime.PublisherSpec{Stream: stream})
	if err := p.Publish(ctx, make([]byte, 2<<20)); !errors.Is(err, runtime.ErrPublish) || !strings.Contains(err.Error(), "MaxRecordSizeInKiB 1024") {
		t.Fatalf("2 MiB on kinesalite: %v; want ErrPublish naming the 1 MiB default", err)
	}
	batch := make([][]byte, 8)
	for i := range batch {
		batch[i] = fill(runtime.MaxRecordSize-64, byte('a'+i))
	}
	if err := runtime.PublishAll(ctx, p, batch); err != nil {
		t.Fatalf("PublishAll of 8 × 1 MiB: %v", err)
	}
}
