package kinesistest_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func streamARN(t *testing.T, api kinesisapi.API, stream string) string {
	t.Helper()
	out, err := api.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
	if err != nil {
		t.Fatal(err)
	}
	return *out.StreamDescriptionSummary.StreamARN
}

func register(t *testing.T, api kinesisapi.API, stream, name string) string {
	t.Helper()
	out, err := api.RegisterStreamConsumer(context.Background(), &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN(t, api, stream)), ConsumerName: &name})
	if err != nil {
		t.Fatalf("RegisterStreamConsumer %s: %v", name, err)
	}
	return *out.Consumer.ConsumerARN
}

func subscribe(t *testing.T, ctx context.Context, api kinesisapi.API, arn, shard string, pos types.StartingPosition) *kinesis.SubscribeToShardEventStream {
	t.Helper()
	// With the runtime's per-call option: the SDK alone races between
	// concurrent streams of one client.
	out, err := api.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: &shard, StartingPosition: &pos}, wire.SubscribeToShardOptions)
	if err != nil {
		t.Fatalf("SubscribeToShard %s: %v", shard, err)
	}
	es := out.GetStream()
	t.Cleanup(func() { es.Close() })
	return es
}

// nextEvent returns the next SubscribeToShardEvent, or nil once the stream
// ended.
func nextEvent(t *testing.T, es *kinesis.SubscribeToShardEventStream, within time.Duration) *types.SubscribeToShardEvent {
	t.Helper()
	select {
	case ev, ok := <-es.Events():
		if !ok {
			return nil
		}
		e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !ok {
			t.Fatalf("event of type %T", ev)
		}
		return &e.Value
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return nil
	}
}

// eventsUntil reads events until n records arrived.
func recordsFrom(t *testing.T, es *kinesis.SubscribeToShardEventStream, n int) ([]types.Record, *types.SubscribeToShardEvent) {
	t.Helper()
	var got []types.Record
	var last *types.SubscribeToShardEvent
	for len(got) < n {
		ev := nextEvent(t, es, 5*time.Second)
		if ev == nil {
			t.Fatalf("stream ended after %d of %d records (err %v)", len(got), n, es.Err())
		}
		got = append(got, ev.Records...)
		last = ev
	}
	return got, last
}

func TestStreamConsumers(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithConsumerLimit(3))
	mustStream(t, s, "orders", 1)
	sarn := streamARN(t, s, "orders")

	out, err := s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	if err != nil {
		t.Fatal(err)
	}
	c := out.Consumer
	if c.ConsumerStatus != types.ConsumerStatusCreating {
		t.Errorf("RegisterStreamConsumer answered %s, want CREATING as the service does", c.ConsumerStatus)
	}
	if !regexp.MustCompile(`^arn:aws:kinesis:us-east-1:000000000000:stream/orders/consumer/billing:[0-9]+$`).MatchString(*c.ConsumerARN) {
		t.Errorf("consumer ARN %s is not the service's form", *c.ConsumerARN)
	}
	d, err := s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: c.ConsumerARN})
	if err != nil {
		t.Fatal(err)
	}
	if d.ConsumerDescription.ConsumerStatus != types.ConsumerStatusActive || *d.ConsumerDescription.StreamARN != sarn {
		t.Errorf("DescribeStreamConsumer = %s of %s, want ACTIVE of %s", d.ConsumerDescription.ConsumerStatus, *d.ConsumerDescription.StreamARN, sarn)
	}
	d, err = s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	if err != nil || *d.ConsumerDescription.ConsumerARN != *c.ConsumerARN {
		t.Fatalf("DescribeStreamConsumer by stream and name = %v, %v", d, err)
	}

	_, err = s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	wantAs[*types.ResourceInUseException](t, "registering a name twice", err)
	_, err = s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("bad name")})
	wantAs[*types.ValidationException](t, "a consumer name with a space", err)
	_, err = s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(sarn + "x"), ConsumerName: aws.String("a")})
	wantAs[*types.ResourceNotFoundException](t, "a consumer of a missing stream", err)
	_, err = s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("nobody")})
	wantAs[*types.ResourceNotFoundException](t, "describing a missing consumer", err)

	for _, n := range []string{"b", "a"} {
		register(t, s, "orders", n)
	}
	_, err = s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("d")})
	wantAs[*types.LimitExceededException](t, "a fourth consumer over a limit of 3", err)
	if sum, _ := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")}); *sum.StreamDescriptionSummary.ConsumerCount != 3 {
		t.Errorf("ConsumerCount = %d, want 3", *sum.StreamDescriptionSummary.ConsumerCount)
	}

	// Two pages of two and one.
	var names []string
	in := &kinesis.ListStreamConsumersInput{StreamARN: &sarn, MaxResults: aws.Int32(2)}
	for pages := 0; ; pages++ {
		l, err := s.ListStreamConsumers(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Consumers {
			names = append(names, *c.ConsumerName)
		}
		if l.NextToken == nil {
			if pages != 1 {
				t.Errorf("%d pages, want 2", pages+1)
			}
			break
		}
		in = &kinesis.ListStreamConsumersInput{StreamARN: &sarn, NextToken: l.NextToken, MaxResults: aws.Int32(2)}
	}
	if fmt.Sprint(names) != "[a b billing]" {
		t.Errorf("ListStreamConsumers = %v, want [a b billing]", names)
	}

	if _, err := s.DeregisterStreamConsumer(ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: c.ConsumerARN}); err != nil {
		t.Fatal(err)
	}
	_, err = s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: c.ConsumerARN})
	wantAs[*types.ResourceNotFoundException](t, "a deregistered consumer", err)
	// Registered again at once: a new ARN, and the old one stays gone.
	again := register(t, s, "orders", "billing")
	if again == *c.ConsumerARN {
		t.Errorf("a consumer registered again has its old ARN %s", again)
	}
	_, err = s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: c.ConsumerARN})
	wantAs[*types.ResourceNotFoundException](t, "the ARN of a consumer registered again", err)
}

func TestConsumerActivation(t *testing.T) {
	ctx := testCtx(t)
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithConsumerActivation(3*time.Second))
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	status := func() types.ConsumerStatus {
		d, err := s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: &arn})
		if err != nil {
			t.Fatal(err)
		}
		return d.ConsumerDescription.ConsumerStatus
	}
	if st := status(); st != types.ConsumerStatusCreating {
		t.Fatalf("status %s right after registering, want CREATING", st)
	}
	_, err := s.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String("shardId-000000000000"), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
	wantAs[*types.ResourceInUseException](t, "subscribing a CREATING consumer", err)
	clk.Advance(3 * time.Second)
	if st := status(); st != types.ConsumerStatusActive {
		t.Fatalf("status %s after the activation time, want ACTIVE", st)
	}
}

func TestSubscribeToShardPushesRecords(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	first := put(t, s, "orders", "k", "r0")
	put(t, s, "orders", "k", "r1")

	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	got, ev := recordsFrom(t, es, 2)
	if fmt.Sprint(data(got)) != "[r0 r1]" || *got[0].SequenceNumber != *first.SequenceNumber || *got[0].PartitionKey != "k" || got[0].ApproximateArrivalTimestamp == nil {
		t.Fatalf("first event: records %v (first %s), want [r0 r1] from %s", data(got), *got[0].SequenceNumber, *first.SequenceNumber)
	}
	if *ev.ContinuationSequenceNumber != *got[1].SequenceNumber || *ev.MillisBehindLatest != 0 || ev.ChildShards != nil {
		t.Fatalf("event: continuation %v millis %v children %v; want the last record's number, 0, none", aws.ToString(ev.ContinuationSequenceNumber), *ev.MillisBehindLatest, ev.ChildShards)
	}

	// A record appended later is pushed at once: no poll interval.
	start := time.Now()
	p := put(t, s, "orders", "k", "r2")
	got, ev = recordsFrom(t, es, 1)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a record took %v to be pushed", took)
	}
	if fmt.Sprint(data(got)) != "[r2]" || *ev.ContinuationSequenceNumber != *p.SequenceNumber {
		t.Fatalf("pushed %v continuing at %s, want [r2] at %s", data(got), *ev.ContinuationSequenceNumber, *p.SequenceNumber)
	}
}

func TestSubscribeToShardStartingPositions(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithSubscribeInterval(0))
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	var seqs []string
	for i := range 3 {
		seqs = append(seqs, *put(t, s, "orders", "k", fmt.Sprintf("r%d", i)).SequenceNumber)
	}
	time.Sleep(5 * time.Millisecond)
	mid := time.Now()
	time.Sleep(5 * time.Millisecond)
	seqs = append(seqs, *put(t, s, "orders", "k", "r3").SequenceNumber)

	for _, c := range []struct {
		name string
		pos  types.StartingPosition
		want string
	}{
		{"TRIM_HORIZON", types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}, "[r0 r1 r2 r3]"},
		{"AT_SEQUENCE_NUMBER", types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: &seqs[1]}, "[r1 r2 r3]"},
		{"AFTER_SEQUENCE_NUMBER", types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: &seqs[1]}, "[r2 r3]"},
		{"AT_TIMESTAMP", types.StartingPosition{Type: types.ShardIteratorTypeAtTimestamp, Timestamp: &mid}, "[r3]"},
		{"LATEST", types.StartingPosition{Type: types.ShardIteratorTypeLatest}, "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			es := subscribe(t, sctx, s, arn, shard0, c.pos)
			ev := nextEvent(t, es, 5*time.Second)
			if ev == nil || fmt.Sprint(data(ev.Records)) != c.want {
				t.Fatalf("first event %+v, want records %s", ev, c.want)
			}
			// The continuation resumes exactly after what was sent.
			if *ev.ContinuationSequenceNumber != seqs[3] && c.want != "[]" {
				t.Errorf("continuation %s, want %s", *ev.ContinuationSequenceNumber, seqs[3])
			}
			es.Close()
			cancel()
			waitNoSubscriptions(t, s, "orders")
		})
	}

	// An empty event's continuation, used AFTER_SEQUENCE_NUMBER, skips
	// nothing written since.
	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	ev := nextEvent(t, es, 5*time.Second)
	es.Close()
	waitNoSubscriptions(t, s, "orders")
	put(t, s, "orders", "k", "r4")
	es = subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: ev.ContinuationSequenceNumber})
	if got, _ := recordsFrom(t, es, 1); fmt.Sprint(data(got)) != "[r4]" {
		t.Fatalf("resumed from an empty event's continuation: %v, want [r4]", data(got))
	}

	_, err := s.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber}})
	wantAs[*types.InvalidArgumentException](t, "AT_SEQUENCE_NUMBER without a number", err)
	_, err = s.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String("shardId-000000000009"), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
	wantAs[*types.ResourceNotFoundException](t, "a missing shard", err)
}

func waitNoSubscriptions(t *testing.T, s *kinesistest.Server, stream string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Subscriptions(stream)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions still active: %v", s.Subscriptions(stream))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSubscribeToShardEndsAtShardEnd(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	put(t, s, "orders", "k", "before")
	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	recordsFrom(t, es, 1)
	if err := s.SplitInHalf("orders", shard0); err != nil {
		t.Fatal(err)
	}
	var last *types.SubscribeToShardEvent
	for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
		if last != nil && last.ContinuationSequenceNumber == nil {
			t.Fatal("an event after the one that ended the shard")
		}
		last = ev
	}
	if es.Err() != nil {
		t.Fatalf("stream ended with %v, want a clean end", es.Err())
	}
	if last == nil || last.ContinuationSequenceNumber != nil || len(last.ChildShards) != 2 {
		t.Fatalf("last event %+v, want no continuation and two ChildShards", last)
	}
	for _, c := range last.ChildShards {
		if len(c.ParentShards) != 1 || c.ParentShards[0] != shard0 || c.HashKeyRange == nil {
			t.Errorf("child %+v, want parent %s and a hash range", c, shard0)
		}
	}
}

func TestSubscribeToShardLimits(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithSubscribeInterval(300*time.Millisecond), kinesistest.WithSubscriptionTakeover(0))
	mustStream(t, s, "orders", 2)
	arn := register(t, s, "orders", "billing")
	other := register(t, s, "orders", "audit")
	latest := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	in := &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &latest}
	es := subscribe(t, ctx, s, arn, shard0, latest)
	_, err := s.SubscribeToShard(ctx, in)
	wantAs[*types.LimitExceededException](t, "a second call within the interval", err)
	time.Sleep(300 * time.Millisecond)
	_, err = s.SubscribeToShard(ctx, in)
	wantAs[*types.ResourceInUseException](t, "a second subscription while the first is active", err)
	// Another shard, and another consumer of the same shard, are free.
	subscribe(t, ctx, s, arn, "shardId-000000000001", latest)
	subscribe(t, ctx, s, other, shard0, latest)
	if n := len(s.Subscriptions("orders")); n != 3 {
		t.Fatalf("%d active subscriptions, want 3", n)
	}
	es.Close()
	waitSubscriptions(t, s, "orders", 2)
	time.Sleep(300 * time.Millisecond) // the refused call counts too
	subscribe(t, ctx, s, arn, shard0, latest)
}

func waitSubscriptions(t *testing.T, s *kinesistest.Server, stream string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Subscriptions(stream)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions active, want %d", len(s.Subscriptions(stream)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSubscribeToShardTakeover(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithSubscribeInterval(0), kinesistest.WithSubscriptionTakeover(200*time.Millisecond))
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	latest := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	old := subscribe(t, ctx, s, arn, shard0, latest)
	nextEvent(t, old, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	subscribe(t, ctx, s, arn, shard0, latest)
	for ev := nextEvent(t, old, 5*time.Second); ev != nil; ev = nextEvent(t, old, 5*time.Second) {
	}
	wantAs[*types.ResourceInUseException](t, "the subscription taken over", old.Err())
}

func TestSubscriptionLifetime(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New(kinesistest.WithSubscriptionLifetime(200 * time.Millisecond))
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	start := time.Now()
	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
	}
	// Ended by its lifetime, not before it; the upper bound leaves room
	// for a loaded -race run (CI once took 3.4 s), not for a subscription
	// that lasts on (its events come every interval).
	if took := time.Since(start); took < 200*time.Millisecond || took > 10*time.Second {
		t.Errorf("subscription lasted %v, want 200ms", took)
	}
	if es.Err() != nil {
		t.Errorf("an expired subscription ended with %v, want a clean end", es.Err())
	}
	waitNoSubscriptions(t, s, "orders")
}

func TestSubscriptionEndsWhenConsumerOrStreamIsDeleted(t *testing.T) {
	for _, c := range []struct {
		name   string
		delete func(*kinesistest.Server, string) error
	}{
		{"consumer", func(s *kinesistest.Server, arn string) error {
			_, err := s.DeregisterStreamConsumer(context.Background(), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn})
			return err
		}},
		{"stream", func(s *kinesistest.Server, _ string) error {
			_, err := s.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String("orders")})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := kinesistest.New()
			mustStream(t, s, "orders", 1)
			arn := register(t, s, "orders", "billing")
			es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
			nextEvent(t, es, 5*time.Second)
			if err := c.delete(s, arn); err != nil {
				t.Fatal(err)
			}
			for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
			}
			wantAs[*types.ResourceNotFoundException](t, "the subscription's end", es.Err())
		})
	}
}

// A connection cut inside an event: the SDK's reader alone takes it for a
// clean end (it treats io.ErrUnexpectedEOF, what Go's HTTP/2 client reports
// for a dropped connection, as the end of the stream); with the runtime's
// wire.SubscribeToShardOptions it is an error.
func TestSubscriptionCutMidEvent(t *testing.T) {
	forCutCases(t, func(t *testing.T, opts []func(*kinesis.Options), cut bool) {
		s := kinesistest.New()
		cutMidEvent(t, s, s, opts, cut)
	})
}

// forCutCases runs test without the runtime's wire options (the SDK's
// reader alone, which misses a cut) and with them (a cut is an error).
func forCutCases(t *testing.T, test func(t *testing.T, opts []func(*kinesis.Options), cut bool)) {
	for _, c := range []struct {
		name string
		opts []func(*kinesis.Options)
		cut  bool
	}{
		{"sdk-alone", nil, false},
		{"with-wire-options", []func(*kinesis.Options){wire.SubscribeToShardOptions}, true},
	} {
		t.Run(c.name, func(t *testing.T) { test(t, c.opts, c.cut) })
	}
}

// cutMidEvent subscribes through api (s, or a client of its HTTP front)
// with opts, cuts the subscription inside an event, and checks that the
// stream ends with no event from the half sent, with wire.ErrEventStreamCut
// if cut, else with no error. It returns the consumer's ARN.
func cutMidEvent(t *testing.T, s *kinesistest.Server, api kinesisapi.API, opts []func(*kinesis.Options), cut bool) string {
	t.Helper()
	ctx := testCtx(t)
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	out, err := api.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	es := out.GetStream()
	defer es.Close()
	nextEvent(t, es, 5*time.Second)
	if n := s.CutSubscriptions("orders", shard0); n != 1 {
		t.Fatalf("cut %d subscriptions, want 1", n)
	}
	if ev := nextEvent(t, es, 5*time.Second); ev != nil {
		t.Fatalf("an event %+v from half an event", ev)
	}
	err = es.Err()
	if got := errors.Is(err, wire.ErrEventStreamCut); got != cut {
		t.Fatalf("stream ended with %v; want a cut error: %v", err, cut)
	}
	if !cut && err != nil {
		t.Fatalf("the SDK alone ended with %v; if the SDK now reports cuts, wire.SubscribeToShardOptions may drop its check", err)
	}
	return arn
}

func TestSubscriptionReset(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	nextEvent(t, es, 5*time.Second)
	if n := s.ResetSubscriptions("orders", shard0); n != 1 {
		t.Fatalf("reset %d subscriptions, want 1", n)
	}
	if ev := nextEvent(t, es, 5*time.Second); ev != nil {
		t.Fatalf("an event %+v from half an event", ev)
	}
	if es.Err() == nil || errors.Is(es.Err(), wire.ErrEventStreamCut) {
		t.Fatalf("a reset stream ended with %v, want the reset's own error", es.Err())
	}
	waitNoSubscriptions(t, s, "orders")
}

// A cut does not wait for a subscriber that stopped reading (its pump is
// blocked writing the next event): it comes at once, mid-event.
func TestCutReachesASubscriberThatIsNotReading(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	es := subscribe(t, ctx, s, arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	nextEvent(t, es, 5*time.Second)
	payload := string(make([]byte, 64<<10))
	for range 8 {
		put(t, s, "orders", "k", payload) // more events than the reader takes unread
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if n := s.CutSubscriptions("orders", shard0); n != 1 {
		t.Fatalf("cut %d subscriptions, want 1", n)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the cut waited %v for the subscriber to read", took)
	}
	n := 0
	for ev := nextEvent(t, es, 5*time.Second); ev != nil; ev = nextEvent(t, es, 5*time.Second) {
		n += len(ev.Records)
	}
	if n >= 8 || !errors.Is(es.Err(), wire.ErrEventStreamCut) {
		t.Fatalf("after the cut: %d of 8 records, then %v; want fewer and a cut", n, es.Err())
	}
}

func TestConsumerDeletion(t *testing.T) {
	ctx := testCtx(t)
	clk := newClock()
	s := kinesistest.New(kinesistest.WithClock(clk.Now), kinesistest.WithConsumerDeletion(3*time.Second))
	mustStream(t, s, "orders", 1)
	arn := register(t, s, "orders", "billing")
	sarn := streamARN(t, s, "orders")
	if _, err := s.DeregisterStreamConsumer(ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn}); err != nil {
		t.Fatal(err)
	}
	d, err := s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: &arn})
	if err != nil || d.ConsumerDescription.ConsumerStatus != types.ConsumerStatusDeleting {
		t.Fatalf("right after deregistering: %v, %v; want DELETING", d, err)
	}
	_, err = s.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	wantAs[*types.ResourceInUseException](t, "registering a DELETING consumer's name", err)
	_, err = s.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: aws.String(shard0), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
	wantAs[*types.ResourceInUseException](t, "subscribing a DELETING consumer", err)
	clk.Advance(3 * time.Second)
	_, err = s.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: &arn})
	wantAs[*types.ResourceNotFoundException](t, "a consumer after its deletion time", err)
	if again := register(t, s, "orders", "billing"); again == arn {
		t.Fatal("registered again with the old ARN")
	}
}
