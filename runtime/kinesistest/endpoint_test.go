package kinesistest_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
)

// The server on a plain-HTTP port, through the SDK's client over h2c: the
// same answers as in process.
func TestConformanceEndpoint(t *testing.T) {
	serve := func(t *testing.T, s *kinesistest.Server) kinesisapi.API {
		e, err := kinesistest.Listen(s, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e.Client(func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} })
	}
	conformance.Run(t, conformance.Harness{
		New:               func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(fastSubscribe)) },
		Throttled:         func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(kinesistest.WithThrottling())) },
		SubscribeInterval: subscribeInterval,
	})
}

// The same over TLS, HTTP/2 negotiated by ALPN, the client trusting the
// endpoint's certificate.
func TestConformanceEndpointTLS(t *testing.T) {
	serve := func(t *testing.T, s *kinesistest.Server) kinesisapi.API {
		e, err := kinesistest.ListenTLS(s, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		if !strings.HasPrefix(e.URL(), "https://") || !strings.Contains(string(e.CertificatePEM()), "BEGIN CERTIFICATE") {
			t.Fatalf("URL %s, certificate %q", e.URL(), e.CertificatePEM())
		}
		return e.Client(func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} })
	}
	conformance.Run(t, conformance.Harness{
		New:               func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(fastSubscribe)) },
		Throttled:         func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(kinesistest.WithThrottling())) },
		SubscribeInterval: subscribeInterval,
	})
}

// A client that speaks HTTP/1.1 only (the AWS CLI, boto3) gets the same
// service, SubscribeToShard's event stream included.
func TestEndpointOverHTTP1(t *testing.T) {
	e := kinesistest.ServeLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var protos []string
	c := e.Client(func(o *kinesis.Options) {
		o.HTTPClient = &http.Client{Transport: recordProto{&protos, http.DefaultTransport.(*http.Transport).Clone()}}
	})
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("s"), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("k"), Data: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("c")})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: reg.Consumer.ConsumerARN, ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.GetStream().Close()
	ev, ok := <-sub.GetStream().Events()
	if !ok {
		t.Fatalf("no event: %v", sub.GetStream().Err())
	}
	recs := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent).Value.Records
	if len(recs) != 1 || string(recs[0].Data) != "hello" {
		t.Fatalf("first event holds %d records, want the one put", len(recs))
	}
	for _, p := range protos {
		if p != "HTTP/1.1" {
			t.Fatalf("calls went over %v, want HTTP/1.1 only", protos)
		}
	}
}

type recordProto struct {
	protos *[]string
	rt     http.RoundTripper
}

func (r recordProto) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.rt.RoundTrip(req)
	if err == nil {
		*r.protos = append(*r.protos, res.Proto)
	}
	return res, err
}

// An application's test: a broker on ServeLocal publishes and consumes
// over the wire, and the endpoint closes under a running subscriber.
func TestServeLocalBroker(t *testing.T) {
	e := kinesistest.ServeLocal(t)
	if err := e.Backend().AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	b := e.NewBroker(runtime.WithApplication("billing"))
	got := make(chan order, 10)
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		got <- o
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(ctx)
	if err := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: "o-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.ID != "o-1" {
			t.Fatalf("handled %+v, want o-1", o)
		}
	case <-ctx.Done():
		t.Fatal("the published order was not handled within 30 s")
	}
	if n := e.Backend().Calls(kinesistest.OpPutRecords) + e.Backend().Calls(kinesistest.OpPutRecord); n == 0 {
		t.Fatal("the server counted no put: the broker did not publish through the endpoint")
	}
}

// ListStreams and DescribeStream, which tools reach for first, answer over
// the wire as the service does: pages of names, a stream's shards.
func TestEndpointListsAndDescribesStreams(t *testing.T) {
	e := kinesistest.ServeLocal(t)
	for _, name := range []string{"c", "a", "b"} {
		if err := e.Backend().AddStream(name, 3); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.Client()
	var names []string
	in := &kinesis.ListStreamsInput{Limit: aws.Int32(2)}
	for pages := 0; ; pages++ {
		out, err := c.ListStreams(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, out.StreamNames...)
		if len(out.StreamSummaries) != len(out.StreamNames) || out.StreamSummaries[0].StreamStatus != types.StreamStatusActive || aws.ToString(out.StreamSummaries[0].StreamARN) == "" {
			t.Fatalf("page %d: summaries %+v", pages, out.StreamSummaries)
		}
		if !aws.ToBool(out.HasMoreStreams) {
			break
		}
		if pages > 3 {
			t.Fatal("ListStreams pages do not end")
		}
		in = &kinesis.ListStreamsInput{Limit: aws.Int32(2), NextToken: out.NextToken}
	}
	if strings.Join(names, " ") != "a b c" {
		t.Errorf("ListStreams: %v, want a b c", names)
	}

	d, err := c.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String("b"), Limit: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	sd := d.StreamDescription
	if aws.ToString(sd.StreamName) != "b" || sd.StreamStatus != types.StreamStatusActive || len(sd.Shards) != 2 || !aws.ToBool(sd.HasMoreShards) || sd.Shards[0].HashKeyRange == nil {
		t.Fatalf("DescribeStream b, Limit 2: %+v", sd)
	}
	d, err = c.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String("b"), ExclusiveStartShardId: sd.Shards[1].ShardId})
	if err != nil {
		t.Fatal(err)
	}
	if sd := d.StreamDescription; len(sd.Shards) != 1 || aws.ToString(sd.Shards[0].ShardId) != "shardId-000000000002" || aws.ToBool(sd.HasMoreShards) {
		t.Fatalf("DescribeStream b after shard 1: %d shards, more %v", len(sd.Shards), aws.ToBool(sd.HasMoreShards))
	}
	var nf *types.ResourceNotFoundException
	if _, err := c.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String("missing")}); !errors.As(err, &nf) {
		t.Errorf("DescribeStream missing: %v, want ResourceNotFoundException", err)
	}
}

// UpdateShardCount reshards to even ranges, between half and twice the
// open shards, and the records put before stay readable.
func TestEndpointUpdateShardCount(t *testing.T) {
	e := kinesistest.ServeLocal(t)
	if err := e.Backend().AddStream("s", 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.Client(func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} })
	for i := range 20 {
		if _, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String(fmt.Sprint("k", i)), Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	update := func(n int32) error {
		_, err := c.UpdateShardCount(ctx, &kinesis.UpdateShardCountInput{StreamName: aws.String("s"), TargetShardCount: aws.Int32(n), ScalingType: types.ScalingTypeUniformScaling})
		return err
	}
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	for _, n := range []int64{3, 5, 4} {
		if err := update(int32(n)); err != nil {
			t.Fatalf("to %d shards: %v", n, err)
		}
		out, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("s"), ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(out.Shards)) != n {
			t.Fatalf("to %d shards: %d open", n, len(out.Shards))
		}
		for i, sh := range out.Shards {
			want := new(big.Int).Div(new(big.Int).Mul(space, big.NewInt(int64(i))), big.NewInt(n))
			if got := aws.ToString(sh.HashKeyRange.StartingHashKey); got != want.String() {
				t.Errorf("to %d shards: shard %d starts at %s, want %s", n, i, got, want)
			}
		}
	}
	var bad *types.InvalidArgumentException
	if err := update(9); !errors.As(err, &bad) {
		t.Errorf("from 4 to 9 shards: %v, want InvalidArgumentException", err)
	}
	if err := update(1); !errors.As(err, &bad) {
		t.Errorf("from 4 to 1 shard: %v, want InvalidArgumentException", err)
	}
	if recs, err := e.Backend().Records("s"); err != nil || len(recs) != 20 {
		t.Errorf("after resharding: %d records (%v), want the 20 put", len(recs), err)
	}
}

// Close ends an open subscription cleanly and returns promptly: the
// command's Ctrl-C does not wait out a subscription's five minutes.
func TestEndpointCloseEndsSubscriptions(t *testing.T) {
	e, err := kinesistest.Listen(kinesistest.New(), "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.Client(func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} })
	if err := e.Backend().AddStream("s", 1); err != nil {
		t.Fatal(err)
	}
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("c")})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: reg.Consumer.ConsumerARN, ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.GetStream().Close()
	<-sub.GetStream().Events() // the first (empty) event: the subscription is open
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a subscription open", d)
	}
	for range sub.GetStream().Events() {
	}
	if err := sub.GetStream().Err(); err != nil {
		t.Errorf("the subscription ended with %v, want a clean end", err)
	}
}
