package conformance

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// The enhanced fan-out cases: stream consumers and SubscribeToShard, read
// through the SDK's event-stream reader with the runtime's per-call option
// (wire.SubscribeToShardOptions), as the runtime reads them.

// noFanOut checks the NoEnhancedFanOut deviation: the backend must refuse
// RegisterStreamConsumer. It reports whether the case should stop there.
func (e *env) noFanOut(name string) bool {
	e.t.Helper()
	if !e.dev.NoEnhancedFanOut {
		return false
	}
	_, err := e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(e.streamARN(name)), ConsumerName: aws.String("conformance")})
	if err == nil {
		e.t.Fatal("declared NoEnhancedFanOut, but RegisterStreamConsumer registered a consumer")
	}
	return true
}

// noSubscriptions checks the wire deviations of SubscribeToShard
// (NoInitialResponse, RefusesSubscriptionInEventStream) on the backend as it
// answers (Harness.Unmended, else the API under test): the SDK must then
// fail on its subscriptions as declared. It reports whether the case
// should stop there: there is no mended API to go on with.
func (e *env) noSubscriptions(name string) bool {
	e.t.Helper()
	if !e.dev.NoInitialResponse && !e.dev.RefusesSubscriptionInEventStream {
		return false
	}
	raw := e.api
	if e.unmended != nil {
		raw = e.unmended
	}
	shard := aws.ToString(e.shards(name)[0].ShardId)
	horizon := types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}
	subscribe := func(api kinesisapi.API, arn string) error {
		_, err := e.trySubscribeOn(api, arn, shard, horizon)
		return err
	}
	if e.dev.NoInitialResponse {
		err := subscribe(raw, e.consumer(name, "no-initial-response"))
		if err == nil || !strings.Contains(err.Error(), "initial-response") {
			e.t.Fatalf("declared NoInitialResponse, but SubscribeToShard answered %v", err)
		}
	}
	if e.dev.RefusesSubscriptionInEventStream {
		nobody := e.streamARN(name) + "/consumer/nobody:1"
		err := subscribe(raw, nobody)
		if _, ok := errors.AsType[*types.ResourceNotFoundException](err); ok || err == nil {
			e.t.Fatalf("declared RefusesSubscriptionInEventStream, but SubscribeToShard of an unknown consumer answered %v", err)
		}
		if e.unmended != nil {
			wantErr[*types.ResourceNotFoundException](e.t, "SubscribeToShard of an unknown consumer (mended)", subscribe(e.api, nobody))
		}
	}
	return e.unmended == nil
}

// unreadable reports whether the backend's subscriptions cannot be read
// (checked by the SubscribeToShard case).
func (e *env) unreadable() bool {
	return (e.dev.NoInitialResponse || e.dev.RefusesSubscriptionInEventStream) && e.unmended == nil
}

func (e *env) streamARN(name string) string {
	e.t.Helper()
	out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
	if err != nil {
		e.t.Fatalf("DescribeStreamSummary %s: %v", name, err)
	}
	return aws.ToString(out.StreamDescriptionSummary.StreamARN)
}

// consumer registers a consumer and waits until it is ACTIVE; it returns
// its ARN and deregisters it when the test ends.
func (e *env) consumer(stream, name string) string {
	e.t.Helper()
	out, err := e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(e.streamARN(stream)), ConsumerName: &name})
	if err != nil {
		e.t.Fatalf("RegisterStreamConsumer %s: %v", name, err)
	}
	arn := aws.ToString(out.Consumer.ConsumerARN)
	e.t.Cleanup(func() {
		_, _ = e.api.DeregisterStreamConsumer(e.ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn})
	})
	e.waitConsumer(arn, types.ConsumerStatusActive)
	return arn
}

// waitConsumer polls DescribeStreamConsumer until the consumer has status
// want, or (want "") until it is not found.
func (e *env) waitConsumer(arn string, want types.ConsumerStatus) {
	e.t.Helper()
	for {
		d, err := e.api.DescribeStreamConsumer(e.ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: &arn})
		switch {
		case want == "" && err != nil:
			wantErr[*types.ResourceNotFoundException](e.t, "DescribeStreamConsumer of a deregistered consumer", err)
			return
		case err != nil:
			e.t.Fatalf("DescribeStreamConsumer %s: %v", arn, err)
		case want != "" && d.ConsumerDescription.ConsumerStatus == want:
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("consumer %s not %q before the deadline", arn, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (e *env) subscribe(arn, shard string, pos types.StartingPosition) *kinesis.SubscribeToShardEventStream {
	e.t.Helper()
	es, err := e.trySubscribe(arn, shard, pos)
	if err != nil {
		e.t.Fatalf("SubscribeToShard %s %s: %v", shard, pos.Type, err)
	}
	return es
}

func (e *env) trySubscribe(arn, shard string, pos types.StartingPosition) (*kinesis.SubscribeToShardEventStream, error) {
	return e.trySubscribeOn(e.api, arn, shard, pos)
}

// trySubscribeOn is trySubscribe through api.
func (e *env) trySubscribeOn(api kinesisapi.API, arn, shard string, pos types.StartingPosition) (*kinesis.SubscribeToShardEventStream, error) {
	out, err := api.SubscribeToShard(e.ctx, &kinesis.SubscribeToShardInput{ConsumerARN: &arn, ShardId: &shard, StartingPosition: &pos}, wire.SubscribeToShardOptions)
	if err != nil {
		return nil, err
	}
	es := out.GetStream()
	e.t.Cleanup(func() { es.Close() })
	return es, nil
}

// event returns the next SubscribeToShardEvent, or nil when the stream
// ended (its Err tells how).
func (e *env) event(es *kinesis.SubscribeToShardEventStream) *types.SubscribeToShardEvent {
	e.t.Helper()
	select {
	case ev, ok := <-es.Events():
		if !ok {
			return nil
		}
		v, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !ok {
			e.t.Fatalf("an event of type %T", ev)
		}
		return &v.Value
	case <-e.ctx.Done():
		e.t.Fatal("no event before the deadline")
		return nil
	}
}

// records reads events until n records came and returns them with the
// last event.
func (e *env) records(es *kinesis.SubscribeToShardEventStream, n int) ([]types.Record, *types.SubscribeToShardEvent) {
	e.t.Helper()
	var got []types.Record
	var last *types.SubscribeToShardEvent
	for len(got) < n {
		ev := e.event(es)
		if ev == nil {
			e.t.Fatalf("the subscription ended after %d of %d records: %v", len(got), n, es.Err())
		}
		if ev.ContinuationSequenceNumber == nil {
			e.t.Fatalf("an event of an open shard without ContinuationSequenceNumber after %d records", len(got))
		}
		got = append(got, ev.Records...)
		last = ev
	}
	return got, last
}

// drain reads a stream to its end and returns its last event.
func (e *env) drain(es *kinesis.SubscribeToShardEventStream) *types.SubscribeToShardEvent {
	e.t.Helper()
	var last *types.SubscribeToShardEvent
	for ev := e.event(es); ev != nil; ev = e.event(es) {
		last = ev
	}
	return last
}

var consumerARNForm = regexp.MustCompile(`^arn:aws:kinesis:[a-z0-9-]+:[0-9]{12}:stream/([^/]+)/consumer/([^/:]+):[0-9]+$`)

func testStreamConsumers(t *testing.T, e *env) {
	name := e.stream(1)
	if e.noFanOut(name) {
		return
	}
	sarn := e.streamARN(name)
	out, err := e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Consumer.ConsumerARN)
	if m := consumerARNForm.FindStringSubmatch(arn); m == nil || m[1] != name || m[2] != "billing" {
		t.Errorf("consumer ARN %q is not arn:aws:kinesis:REGION:ACCOUNT:stream/%s/consumer/billing:EPOCH", arn, name)
	}
	if s := out.Consumer.ConsumerStatus; s != types.ConsumerStatusCreating && s != types.ConsumerStatusActive {
		t.Errorf("RegisterStreamConsumer answered status %s", s)
	}
	e.waitConsumer(arn, types.ConsumerStatusActive)

	d, err := e.api.DescribeStreamConsumer(e.ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(d.ConsumerDescription.ConsumerARN) != arn || aws.ToString(d.ConsumerDescription.StreamARN) != sarn || d.ConsumerDescription.ConsumerCreationTimestamp == nil {
		t.Errorf("DescribeStreamConsumer by stream and name = %+v, want ARN %s of stream %s with a creation time", d.ConsumerDescription, arn, sarn)
	}

	_, err = e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("billing")})
	wantErr[*types.ResourceInUseException](t, "RegisterStreamConsumer of a name already registered", err)
	_, err = e.api.DescribeStreamConsumer(e.ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: &sarn, ConsumerName: aws.String("nobody")})
	wantErr[*types.ResourceNotFoundException](t, "DescribeStreamConsumer of a name never registered", err)

	var names []string
	in := &kinesis.ListStreamConsumersInput{StreamARN: &sarn}
	for {
		l, err := e.api.ListStreamConsumers(e.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Consumers {
			names = append(names, aws.ToString(c.ConsumerName))
		}
		if l.NextToken == nil {
			break
		}
		in = &kinesis.ListStreamConsumersInput{StreamARN: &sarn, NextToken: l.NextToken}
	}
	if fmt.Sprint(names) != "[billing]" {
		t.Errorf("ListStreamConsumers = %v, want [billing]", names)
	}

	if _, err := e.api.DeregisterStreamConsumer(e.ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn}); err != nil {
		t.Fatal(err)
	}
	e.waitConsumer(arn, "") // may pass through DELETING
}

func testSubscribeToShard(t *testing.T, e *env) {
	name := e.stream(1)
	if e.noFanOut(name) || e.noSubscriptions(name) {
		return
	}
	shard := aws.ToString(e.shards(name)[0].ShardId)
	arns := map[string]string{}
	for _, c := range []string{"horizon", "at", "after", "latest"} {
		arns[c] = e.consumer(name, c)
	}
	puts := e.putAll(name, keys("fan", 3), payload)

	es := e.subscribe(arns["horizon"], shard, types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	got, ev := e.records(es, 3)
	sameData(t, "TRIM_HORIZON subscription", got, puts)
	if c := aws.ToString(ev.ContinuationSequenceNumber); c != puts[2].seq {
		t.Errorf("ContinuationSequenceNumber %s after the last record, want its number %s", c, puts[2].seq)
	}
	if ev.MillisBehindLatest == nil || ev.ChildShards != nil {
		t.Errorf("event of an open shard: MillisBehindLatest %v, ChildShards %v; want a number and none", ev.MillisBehindLatest, ev.ChildShards)
	}

	at := e.subscribe(arns["at"], shard, types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: &puts[1].seq})
	got, _ = e.records(at, 2)
	sameData(t, "AT_SEQUENCE_NUMBER of record 1", got, puts[1:])
	after := e.subscribe(arns["after"], shard, types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: &puts[1].seq})
	got, _ = e.records(after, 1)
	sameData(t, "AFTER_SEQUENCE_NUMBER of record 1", got, puts[2:])
	latest := e.subscribe(arns["latest"], shard, types.StartingPosition{Type: types.ShardIteratorTypeLatest})

	// A record written now is pushed to every subscription.
	fresh := e.putOne(name, "fan-new", []byte("fresh"))
	for what, s := range map[string]*kinesis.SubscribeToShardEventStream{"TRIM_HORIZON": es, "AT_SEQUENCE_NUMBER": at, "AFTER_SEQUENCE_NUMBER": after, "LATEST": latest} {
		got, ev := e.records(s, 1)
		sameData(t, what+" subscription, a record written after it started", got, []put{fresh})
		if c := aws.ToString(ev.ContinuationSequenceNumber); c != fresh.seq {
			t.Errorf("%s: ContinuationSequenceNumber %s, want %s", what, c, fresh.seq)
		}
	}
}

func testSubscribeAtShardEnd(t *testing.T, e *env) {
	name := e.stream(1)
	if e.noFanOut(name) || e.unreadable() { // checked by SubscribeToShard
		return
	}
	shards := e.shards(name)
	parent := aws.ToString(shards[0].ShardId)
	arn := e.consumer(name, "ending")
	puts := e.putAll(name, keys("end", 2), payload)
	mid := new(big.Int).Rsh(hashBig(t, shards[0].HashKeyRange.EndingHashKey), 1)
	if _, err := e.api.SplitShard(e.ctx, &kinesis.SplitShardInput{StreamName: &name, ShardToSplit: &parent, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	e.waitActive(name)
	es := e.subscribe(arn, parent, types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	if e.dev.SubscriptionIgnoresShardEnd {
		got, _ := e.records(es, len(puts))
		sameData(t, "records of the closed shard", got, puts)
		if ev := e.event(es); ev == nil || ev.ContinuationSequenceNumber == nil || len(ev.ChildShards) > 0 {
			t.Fatalf("declared SubscriptionIgnoresShardEnd, but after the closed shard's records came %+v (stream error %v)", ev, es.Err())
		}
		return
	}
	var got []types.Record
	var last *types.SubscribeToShardEvent
	for ev := e.event(es); ev != nil; ev = e.event(es) {
		if last != nil && last.ContinuationSequenceNumber == nil {
			t.Fatal("an event after the one without ContinuationSequenceNumber")
		}
		got = append(got, ev.Records...)
		last = ev
	}
	if err := es.Err(); err != nil {
		t.Fatalf("the subscription of a closed shard ended with %v, want a clean end", err)
	}
	sameData(t, "records of the closed shard", got, puts)
	if last == nil || last.ContinuationSequenceNumber != nil {
		t.Fatalf("last event %+v: want one without ContinuationSequenceNumber at the shard's end", last)
	}
	if len(last.ChildShards) != 2 {
		t.Fatalf("last event has %d ChildShards, want the split's 2", len(last.ChildShards))
	}
	for _, c := range last.ChildShards {
		if len(c.ParentShards) != 1 || c.ParentShards[0] != parent {
			t.Errorf("child %s has parents %v, want [%s]", aws.ToString(c.ShardId), c.ParentShards, parent)
		}
	}
}

func testSubscribeLimits(t *testing.T, e *env) {
	name := e.stream(1)
	if e.noFanOut(name) || e.unreadable() { // checked by SubscribeToShard
		return
	}
	shard := aws.ToString(e.shards(name)[0].ShardId)
	arn := e.consumer(name, "limited")
	latest := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	before := time.Now()
	es := e.subscribe(arn, shard, latest)
	start := time.Now()
	e.event(es)
	_, err := e.trySubscribe(arn, shard, latest)
	// The two calls reached the server less than this apart: under the
	// interval, the second is within it for sure; over it (a loaded
	// machine, the tests' interval being 200 ms), it may be past it, where
	// a subscription younger than 5 s answers ResourceInUse.
	apart := time.Since(before)
	switch _, inUse := errors.AsType[*types.ResourceInUseException](err); {
	case e.dev.NoSubscribeRateLimit:
		if _, ok := errors.AsType[*types.LimitExceededException](err); ok {
			t.Fatalf("declared NoSubscribeRateLimit, but a second SubscribeToShard within the subscribe interval answered %v", err)
		}
		wantErr[*types.ResourceInUseException](t, "a second SubscribeToShard within the subscribe interval (NoSubscribeRateLimit)", err)
	case inUse && apart >= e.subscribeInterval:
		t.Logf("the second SubscribeToShard came up to %v after the first, past the %v interval: ResourceInUse, not the rate limit, is checked", apart, e.subscribeInterval)
	default:
		wantErr[*types.LimitExceededException](t, "a second SubscribeToShard within the subscribe interval", err)
	}
	select {
	case <-time.After(time.Until(start.Add(e.subscribeInterval + 100*time.Millisecond))):
	case <-e.ctx.Done():
		t.Fatal("deadline")
	}
	_, err = e.trySubscribe(arn, shard, latest)
	wantErr[*types.ResourceInUseException](t, "SubscribeToShard while a subscription younger than 5 s holds the shard", err)
}

func testSubscribeDeregistered(t *testing.T, e *env) {
	name := e.stream(1)
	if e.noFanOut(name) || e.unreadable() { // checked by SubscribeToShard
		return
	}
	shard := aws.ToString(e.shards(name)[0].ShardId)
	arn := e.consumer(name, "leaving")
	es := e.subscribe(arn, shard, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	e.event(es)
	if _, err := e.api.DeregisterStreamConsumer(e.ctx, &kinesis.DeregisterStreamConsumerInput{ConsumerARN: &arn}); err != nil {
		t.Fatal(err)
	}
	if e.dev.SubscriptionOutlivesConsumer {
		e.waitConsumer(arn, "")
		if ev := e.event(es); ev == nil {
			t.Fatalf("declared SubscriptionOutlivesConsumer, but the subscription ended with %v when its consumer was deregistered", es.Err())
		}
		_, err := e.trySubscribe(arn, shard, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
		wantErr[*types.ResourceNotFoundException](t, "SubscribeToShard of a deregistered consumer", err)
		return
	}
	e.drain(es)
	wantErr[*types.ResourceNotFoundException](t, "the end of a subscription whose consumer was deregistered", es.Err())
	_, err := e.trySubscribe(arn, shard, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	wantErr[*types.ResourceNotFoundException](t, "SubscribeToShard of a deregistered consumer", err)
}
