package kinesistest_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// newHTTP starts an HTTP/2 front for s and returns a client of it that
// counts the answers that came over HTTP/2.
func newHTTP(t *testing.T, s *kinesistest.Server) (*kinesistest.HTTPServer, *kinesis.Client, *atomic.Int64) {
	t.Helper()
	h := kinesistest.NewHTTPServer(s)
	t.Cleanup(h.Close)
	hc := h.HTTPClient()
	var h2 atomic.Int64
	c := h.Client(func(o *kinesis.Options) {
		o.HTTPClient = doerFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := hc.Do(r)
			if err == nil && resp.ProtoMajor == 2 {
				h2.Add(1)
			}
			return resp, err
		})
	})
	return h, c, &h2
}

// The SDK's real HTTP/2 event-stream path: records pushed as they arrive,
// continuation numbers, the shard's end with ChildShards.
func TestHTTPServerSubscribeToShard(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	_, c, h2 := newHTTP(t, s)
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	arn := register(t, c, "orders", "billing")
	p0, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("k"), Data: []byte("r0\x00\xff")})
	if err != nil {
		t.Fatal(err)
	}
	es := subscribe(t, ctx, c, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: p0.SequenceNumber})
	got, ev := recordsFrom(t, es, 1)
	if string(got[0].Data) != "r0\x00\xff" || *got[0].SequenceNumber != *p0.SequenceNumber || *ev.ContinuationSequenceNumber != *p0.SequenceNumber {
		t.Fatalf("first event %+v, want r0 at %s", ev, *p0.SequenceNumber)
	}
	if got[0].ApproximateArrivalTimestamp == nil || time.Since(*got[0].ApproximateArrivalTimestamp) > time.Minute {
		t.Fatalf("arrival time %v", got[0].ApproximateArrivalTimestamp)
	}
	start := time.Now()
	put(t, s, "orders", "k", "r1")
	if got, _ := recordsFrom(t, es, 1); string(got[0].Data) != "r1" {
		t.Fatalf("pushed %v, want r1", data(got))
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a record took %v to arrive over HTTP/2", took)
	}
	if err := s.SplitInHalf("orders", shard0); err != nil {
		t.Fatal(err)
	}
	var last *types.SubscribeToShardEvent
	for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
		last = ev
	}
	if es.Err() != nil || last == nil || last.ContinuationSequenceNumber != nil || len(last.ChildShards) != 2 {
		t.Fatalf("shard end: last event %+v, err %v; want ChildShards, no continuation, a clean end", last, es.Err())
	}
	if h2.Load() == 0 {
		t.Fatal("no answer came over HTTP/2")
	}
}

// Errors before the stream, and the exception that ends one, reach the
// SDK client as its typed errors.
func TestHTTPServerSubscriptionErrors(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithSubscriptionTakeover(0))
	_, c, _ := newHTTP(t, s)
	mustStream(t, s, "orders", 1)
	arn := register(t, c, "orders", "billing")
	latest := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	in := &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &latest}

	es := subscribe(t, ctx, c, arn, shard0, latest)
	nextEvent(t, es, 5*time.Second)
	_, err := c.SubscribeToShard(ctx, in)
	wantAs[*types.LimitExceededException](t, "a second call within a second", err)

	s.InjectCallFault(func(call kinesistest.Call) error {
		if call.Op == kinesistest.OpSubscribeToShard && call.Consumer == "billing" {
			return &types.ResourceInUseException{Message: aws.String("injected")}
		}
		return nil
	})
	_, err = c.SubscribeToShard(ctx, in)
	wantAs[*types.ResourceInUseException](t, "an injected refusal", err)
	s.InjectCallFault(nil)

	if _, err := c.DeregisterStreamConsumer(ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn}); err != nil {
		t.Fatal(err)
	}
	for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
	}
	wantAs[*types.ResourceNotFoundException](t, "a subscription whose consumer was deregistered", es.Err())
}

// A TCP connection dropped inside an event, over the real HTTP/2 path: the
// SDK's reader alone ends the stream silently; with the runtime's wire
// options it is an error. The client then subscribes again.
func TestHTTPServerCutMidEvent(t *testing.T) {
	forCutCases(t, func(t *testing.T, opts []func(*kinesis.Options), cut bool) {
		s := kinesistest.New(kinesistest.WithSubscribeInterval(0))
		_, client, _ := newHTTP(t, s)
		arn := cutMidEvent(t, s, client, opts, cut)
		es := subscribe(t, testCtx(t), client, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
		if ev := nextEvent(t, es, 5*time.Second); ev == nil {
			t.Fatalf("no event after reconnecting: %v", es.Err())
		}
	})
}

// Two consumers of one stream each get every record, over one client.
func TestHTTPServerTwoConsumers(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	_, c, _ := newHTTP(t, s)
	mustStream(t, s, "orders", 1)
	var streams []*kinesis.SubscribeToShardEventStream
	for _, name := range []string{"billing", "audit"} {
		arn := register(t, c, "orders", name)
		out, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}}, wire.SubscribeToShardOptions)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { out.GetStream().Close() })
		streams = append(streams, out.GetStream())
	}
	for i := range 50 {
		put(t, s, "orders", fmt.Sprint("k", i%3), fmt.Sprint("r", i))
	}
	for i, es := range streams {
		got, _ := recordsFrom(t, es, 50)
		for j, r := range got {
			if string(r.Data) != fmt.Sprint("r", j) {
				t.Fatalf("consumer %d: record %d is %s", i, j, r.Data)
			}
		}
	}
}

// ResetSubscriptions aborts one HTTP/2 stream after half an event: its
// subscriber sees an error (the SDK reports a reset itself), and another
// subscription on the same connection goes on.
func TestHTTPServerResetOneStream(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	_, c, _ := newHTTP(t, s)
	mustStream(t, s, "orders", 2)
	arn := register(t, c, "orders", "billing")
	latest := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	reset := subscribe(t, ctx, c, arn, shard0, latest)
	other := subscribe(t, ctx, c, arn, "shardId-000000000001", latest)
	nextEvent(t, reset, 5*time.Second)
	nextEvent(t, other, 5*time.Second)
	if n := s.ResetSubscriptions("orders", shard0); n != 1 {
		t.Fatalf("reset %d subscriptions, want 1", n)
	}
	if ev := nextEvent(t, reset, 5*time.Second); ev != nil {
		t.Fatalf("an event %+v from half an event", ev)
	}
	if reset.Err() == nil {
		t.Fatal("a reset stream ended without an error")
	}
	// A key of shard 1 (keys route by MD5; try until one lands there).
	for i := 0; ; i++ {
		if p := put(t, s, "orders", fmt.Sprint("key-", i), "still-here"); *p.ShardId == "shardId-000000000001" {
			break
		}
	}
	if got, _ := recordsFrom(t, other, 1); string(got[0].Data) != "still-here" {
		t.Fatalf("the other subscription got %v", data(got))
	}
}
