package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// encMsg is aggMsg with a field that may fail to encode.
type encMsg struct {
	Key string `json:"key"`
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
	V   any    `json:"v,omitempty"`
}

// panicky panics when encoded.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

// storedPayloads returns each stored message's headers and payload, by
// key and N, read from the in-process backend's records.
func storedPayloads(t *testing.T, s *kinesistest.Server, stream string) map[string]storedPayload {
	t.Helper()
	recs, err := s.Records(stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]storedPayload{}
	for _, r := range recs {
		subs, ok, err := kpl.Deaggregate(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			subs = []kpl.Record{{PartitionKey: aws.ToString(r.PartitionKey), Data: r.Data}}
		}
		for _, sub := range subs {
			h, payload, err := runtime.DecodeRecord(sub.Data)
			if err != nil {
				t.Fatal(err)
			}
			var m encMsg
			if err := json.Unmarshal(payload, &m); err != nil {
				t.Fatalf("payload %q: %v", payload, err)
			}
			out[fmt.Sprintf("%s/%d", sub.PartitionKey, m.N)] = storedPayload{h, bytes.Clone(payload), ok}
		}
	}
	return out
}

type storedPayload struct {
	headers    runtime.Headers
	payload    []byte
	aggregated bool
}

// TestAggregatedPublishEncoding: a lone aggregated Publish, whose message
// its aggregator encodes, stores exactly json.Marshal's bytes (headers in
// the envelope), from many callers at once and at every size; a message
// that cannot be encoded fails alone with the ErrPublish "encode" error
// naming the stream, before any call; one whose MarshalJSON panics panics
// in its caller, as it would have had the caller encoded it.
func TestAggregatedPublishEncoding(t *testing.T) {
	// 9 s under -race on a quiet machine; a loaded CI run once passed 60.
	ctx := testContext(t, 3*time.Minute)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 2)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[*encMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})

	err := p.Message(&encMsg{Key: "k", N: 0, V: make(chan int)}).PartitionKey("k").Publish(ctx)
	var re *runtime.Error
	var ute *json.UnsupportedTypeError
	if !errors.Is(err, runtime.ErrPublish) || !errors.As(err, &re) || re.Op != "encode" || re.Stream != stream || !errors.As(err, &ute) {
		t.Errorf("an unencodable message: %v, want ErrPublish from encode, naming the stream, with json's error", err)
	}
	if n := s.Calls(kinesistest.OpPutRecords); n != 0 {
		t.Errorf("an unencodable message made %d PutRecords calls", n)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("a MarshalJSON that panics: recovered %v, want its panic in the caller", r)
			}
		}()
		_ = p.Message(&encMsg{Key: "k", N: 0, V: panicky{}}).PartitionKey("k").Publish(ctx)
	}()

	// Many callers, every size (a few over the encoder's slab), some
	// messages that fail, some with headers: each stored one is byte for
	// byte what json.Marshal makes of it.
	const callers, each = 32, 60
	want := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("key-%d", c)
			for i := range each {
				m := &encMsg{Key: key, N: i, Pad: strings.Repeat("é<>&", (c*each+i)*7%900)}
				bad := i%13 == 5
				if bad {
					m.V = func() {}
				}
				msg := p.Message(m).PartitionKey(key)
				if i%4 == 0 {
					msg.Header("i", fmt.Sprint(i))
				}
				data, _ := json.Marshal(m)
				err := msg.Publish(ctx)
				if bad {
					var ute *json.UnsupportedTypeError
					if !errors.Is(err, runtime.ErrPublish) || !errors.As(err, &ute) {
						t.Errorf("%s/%d, unencodable: %v", key, i, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s/%d: %v", key, i, err)
					continue
				}
				mu.Lock()
				want[fmt.Sprintf("%s/%d", key, i)] = data
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := storedPayloads(t, s, stream)
	if len(got) != len(want) {
		t.Errorf("%d messages stored, want %d", len(got), len(want))
	}
	for k, data := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s not stored", k)
			continue
		}
		if !bytes.Equal(g.payload, data) {
			t.Errorf("%s stored as %q, want %q", k, g.payload, data)
		}
		var n int
		fmt.Sscanf(k[strings.IndexByte(k, '/')+1:], "%d", &n)
		if h, ok := g.headers["i"]; (n%4 == 0) != ok || ok && h != fmt.Sprint(n) {
			t.Errorf("%s stored with headers %v", k, g.headers)
		}
	}
	msgs, _ := readMessages(ctx, t, s, stream)
	last := map[string]int{}
	for _, m := range msgs {
		if m.key != m.Key || !m.inRange {
			t.Errorf("message %s/%d read under key %q, on its key's shard: %v", m.Key, m.N, m.key, m.inRange)
		}
		if l, ok := last[m.Key]; ok && m.N <= l {
			t.Errorf("key %s read %d after %d", m.Key, m.N, l)
		}
		last[m.Key] = m.N
	}
}

// TestAggregatedPublishLargeMessage: a lone aggregated Publish of a
// message over 1 MiB on a stream that takes 10 MiB records is stored
// plain (its aggregator hands it back to its caller, which learns the
// stream's size); one over the stream's size is an ErrPublish error before
// any call.
func TestAggregatedPublishLargeMessage(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := sizedStream(ctx, t, s, "agg-large-publish-", 10240)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
	for i, pad := range []int{10, 5 << 20, 10} {
		if err := p.Message(aggMsg{Key: "k", N: i, Pad: strings.Repeat("x", pad)}).Header("h", "v").Publish(ctx); err != nil {
			t.Fatalf("message %d of %d bytes: %v", i, pad, err)
		}
	}
	calls := s.Calls(kinesistest.OpPutRecords)
	err := p.Publish(ctx, aggMsg{Key: "k", N: 3, Pad: strings.Repeat("x", 11<<20)})
	var re *runtime.Error
	if !errors.Is(err, runtime.ErrPublish) || !errors.As(err, &re) || re.Stream != stream || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("a message over the stream's 10 MiB: %v, want ErrPublish saying it exceeds the limit", err)
	}
	if s.Calls(kinesistest.OpPutRecords) != calls {
		t.Errorf("a message over the stream's size made a call")
	}
	msgs, _ := readMessages(ctx, t, s, stream)
	checkKeyed(t, msgs, map[string]int{"k": 3})
	for _, m := range msgs {
		if (m.N == 1) == m.aggregated {
			t.Errorf("message %d: aggregated=%v; want only the 5 MiB one plain", m.N, m.aggregated)
		}
	}
}

// blocking's MarshalJSON says it has started, then waits for release.
type blocking struct{ started, release chan struct{} }

func (b blocking) MarshalJSON() ([]byte, error) {
	close(b.started)
	<-b.release
	return []byte(`"done"`), nil
}

// TestAggregatedPublishCallerGivesUpWhileEncoded: a caller whose ctx ends
// while its aggregator is encoding its message does not return before the
// encoding does (the message is never read after Publish has returned),
// then reports it not sent, and it is not stored.
func TestAggregatedPublishCallerGivesUpWhileEncoded(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[encMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
	msg := blocking{started: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(msg.release) })
	t.Cleanup(release) // before connect's Shutdown, which waits for the aggregator
	callerCtx, giveUp := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { res <- p.Publish(callerCtx, encMsg{Key: "k", V: msg}) }()
	<-msg.started
	giveUp()
	select {
	case err := <-res:
		t.Fatalf("Publish returned while its message was being encoded: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-res; !errors.Is(err, runtime.ErrPublish) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Errorf("Publish: %v, want ErrPublish: not sent", err)
	}
	if err := p.Publish(ctx, encMsg{Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	if got := storedKeyN(ctx, t, s, stream); len(got) != 1 || got[0] != "k/1" {
		t.Errorf("stored %v, want only k/1", got)
	}
}

// fixedTracer starts spans that all carry one valid span context, so that
// a traced publish has a traceparent to inject.
type fixedTracer struct {
	noop.Tracer
	sc trace.SpanContext
}

func (f fixedTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := fixedSpan{sc: f.sc}
	return trace.ContextWithSpan(ctx, s), s
}

type fixedSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s fixedSpan) SpanContext() trace.SpanContext { return s.sc }

type fixedTracerProvider struct {
	noop.TracerProvider
	sc trace.SpanContext
}

func (p fixedTracerProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return fixedTracer{sc: p.sc}
}

// TestAggregatedPublishTraced: a traced lone aggregated Publish, whose
// message its aggregator encodes, stores the trace context its caller's
// span injected, beside the message's own headers.
func TestAggregatedPublishTraced(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.WithTracerProvider(fixedTracerProvider{sc: sc})))
	p := runtime.NewPublisher[encMsg](b, runtime.PublisherSpec{Stream: stream, PartitionKey: "k", Aggregate: true})
	if err := p.Message(encMsg{Key: "k", N: 0}).Header("h", "v").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, encMsg{Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	got := storedPayloads(t, s, stream)
	want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	for k, h := range map[string]string{"k/0": "v", "k/1": ""} {
		m, ok := got[k]
		if !ok {
			t.Fatalf("%s not stored", k)
		}
		if m.headers["traceparent"] != want || m.headers["h"] != h {
			t.Errorf("%s stored with headers %v, want traceparent %s and h=%q", k, m.headers, want, h)
		}
	}
}
