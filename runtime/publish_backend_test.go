package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

type shipment struct {
	Order int    `json:"order"`
	Note  string `json:"note"`
}

func TestPublishReadBackInProcess(t *testing.T) {
	s := kinesistest.New()
	testPublishReadBack(t, s, runtime.WithKinesisClient(s))
}

// TestPublishReadBackKinesalite publishes through the SDK client over HTTP
// to kinesalite and reads the records back with plain SDK calls.
func TestPublishReadBackKinesalite(t *testing.T) {
	api, opts := liveClient(livetest.KinesisEndpoint(t))
	testPublishReadBack(t, api, opts...)
}

func testPublishReadBack(t *testing.T, api kinesisapi.API, opts ...runtime.Option) {
	ctx := testContext(t, 30*time.Second)
	stream := createStream(ctx, t, api, 2)

	b := connect(ctx, t, runtime.NewBroker(opts...))
	p := runtime.NewPublisher[shipment](b, runtime.PublisherSpec{Stream: stream})

	// A stream that does not exist is an ErrStream error naming it.
	missing := stream + "-missing"
	err := runtime.NewPublisher[shipment](b, runtime.PublisherSpec{Stream: missing}).Publish(ctx, shipment{})
	var re *runtime.Error
	if !errors.Is(err, runtime.ErrStream) || !errors.As(err, &re) || re.Stream != missing {
		t.Errorf("publish to a missing stream: %v, want ErrStream naming %s", err, missing)
	}

	// One record whose key arrives in a header map, with a user header.
	want := shipment{Order: 7, Note: "héllo | world\n"}
	receipt, err := p.Message(want).Headers(runtime.Headers{runtime.PartitionKeyHeader: "cust-1", "trace": "t-1"}).Send(ctx)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	// 4 keys × 50 records, each key from its own goroutine, concurrently.
	keys := []string{"k-a", "k-b", "k-c", "k-d"}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for i := range 50 {
				if err := p.Message(shipment{Order: i, Note: k}).PartitionKey(k).Publish(ctx); err != nil {
					t.Errorf("publish %s/%d: %v", k, i, err)
					return
				}
			}
		})
	}
	wg.Wait()

	recs := readAll(ctx, t, api, stream, 1+len(keys)*50)
	got := map[string][]int{}
	for _, r := range recs {
		h, payload, err := runtime.DecodeRecord(r.Data)
		if err != nil {
			t.Fatalf("decode %q: %v", r.Data, err)
		}
		var m shipment
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("payload %q: %v", payload, err)
		}
		key := aws.ToString(r.PartitionKey)
		if key == "cust-1" {
			if m != want || !maps.Equal(h, runtime.Headers{"trace": "t-1"}) {
				t.Errorf("read back %+v %v, want %+v and the trace header only", m, h, want)
			}
			if aws.ToString(r.SequenceNumber) != receipt.SequenceNumber || r.shard != receipt.ShardID {
				t.Errorf("stored at %s/%s, receipt says %+v", r.shard, aws.ToString(r.SequenceNumber), receipt)
			}
			continue
		}
		if len(h) != 0 || m.Note != key {
			t.Errorf("record %q under key %s: headers %v", payload, key, h)
		}
		got[key] = append(got[key], m.Order)
	}
	for _, k := range keys {
		if want := seq(50); !slices.Equal(got[k], want) {
			t.Errorf("key %s read back %v, want %v", k, got[k], want)
		}
	}
}

// TestPartialFailureOnInProcessBackend throttles entries on the in-process
// server and checks that every record arrives once, in per-key order.
func TestPartialFailureOnInProcessBackend(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 4)
	var mu sync.Mutex
	attempts := map[string]int{}
	s.InjectPutFault(func(_, key string) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[key]++
		if attempts[key]%3 != 0 { // two of every three attempts of a key fail
			return &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
		}
		return nil
	})
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
	p := runtime.NewPublisher[shipment](b, runtime.PublisherSpec{Stream: stream})

	keys := []string{"a", "b", "c", "d", "e", "f"}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for i := range 30 {
				if err := p.Message(shipment{Order: i, Note: k}).PartitionKey(k).Publish(ctx); err != nil {
					t.Errorf("publish %s/%d: %v", k, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.InjectPutFault(nil)

	got := map[string][]int{}
	for _, r := range readAll(ctx, t, s, stream, len(keys)*30) {
		var m shipment
		_, payload, _ := runtime.DecodeRecord(r.Data)
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		got[m.Note] = append(got[m.Note], m.Order)
	}
	for _, k := range keys {
		if !slices.Equal(got[k], seq(30)) {
			t.Errorf("key %s stored %v, want 0..29 once each, in order", k, got[k])
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// uniqueName is prefix and eight random hex digits: a stream name no other
// test run uses.
func uniqueName(prefix string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + hex.EncodeToString(r[:])
}

func createStream(ctx context.Context, t testing.TB, api kinesisapi.API, shards int32) string {
	t.Helper()
	name := uniqueName("publish-")
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: &shards}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	waitActive(ctx, t, api, name, "")
	return name
}

// testContext bounds a test's waits by d. It ends after d, or once the
// test is done: after its deferred calls and after the Cleanups registered
// later, such as connect's Shutdown.
func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect connects b, ending the test if it cannot, and shuts b down once
// the test is done (after its deferred calls). It returns b.
func connect(ctx context.Context, t testing.TB, b *runtime.Broker) *runtime.Broker {
	t.Helper()
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

// waitActive waits for stream to be ACTIVE after its creation or a
// reshard (what, if not empty, says which, with a leading space). The
// service offers no event for it; kinesalite here has no delay, so this
// ends at once or after a few milliseconds.
func waitActive(ctx context.Context, t testing.TB, api kinesisapi.API, stream, what string) {
	t.Helper()
	for {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s not active%s: %v", stream, what, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type readRecord struct {
	types.Record
	shard string
}

// readAll reads every shard from the horizon until want records are in hand.
func readAll(ctx context.Context, t *testing.T, api kinesisapi.API, stream string, want int) []readRecord {
	t.Helper()
	shards, err := api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: &stream})
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	var out []readRecord
	for _, sh := range shards.Shards {
		it, err := api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: &stream, ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatalf("GetShardIterator: %v", err)
		}
		iter := it.ShardIterator
		for iter != nil {
			res, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatalf("GetRecords: %v", err)
			}
			for _, r := range res.Records {
				out = append(out, readRecord{Record: r, shard: aws.ToString(sh.ShardId)})
			}
			if len(res.Records) == 0 { // everything was published before the read
				break
			}
			iter = res.NextShardIterator
		}
	}
	if len(out) != want {
		t.Fatalf("read %d records back, want %d", len(out), want)
	}
	return out
}
