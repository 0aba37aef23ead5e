package kinesislambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

type order struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// env is an in-process stream "orders" (two shards) and a dead-letter
// stream, with a broker on them.
type env struct {
	t   *testing.T
	ctx context.Context
	srv *kinesistest.Server
	b   *runtime.Broker
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	srv := kinesistest.New()
	for name, n := range map[string]int{"orders": 2, "dl": 1} {
		if err := srv.AddStream(name, n); err != nil {
			t.Fatal(err)
		}
	}
	return &env{t: t, ctx: ctx, srv: srv, b: srv.NewBroker()}
}

func (e *env) subscribe(h runtime.Handler[order], opts ...runtime.SubscribeOption) {
	e.t.Helper()
	if _, err := runtime.Subscribe(e.b, "orders", h, opts...); err != nil {
		e.t.Fatal(err)
	}
}

// record is an event record of stream "orders" as the mapping makes it.
func record(stream string, i int, key string, data []byte) events.KinesisEventRecord {
	seq := fmt.Sprintf("4956816737%046d", i+1)
	return events.KinesisEventRecord{
		EventSource:    "aws:kinesis",
		EventID:        "shardId-000000000000:" + seq,
		EventSourceArn: "arn:aws:kinesis:us-east-1:000000000000:stream/" + stream,
		Kinesis:        events.KinesisRecord{PartitionKey: key, SequenceNumber: seq, Data: data},
	}
}

func orderRecord(i int, key string) events.KinesisEventRecord {
	data, _ := json.Marshal(order{Key: key, N: i})
	return record("orders", i, key, data)
}

func (e *env) deadLetters() []runtime.DeadLetterInfo {
	e.t.Helper()
	recs, err := e.srv.Records("dl")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []runtime.DeadLetterInfo
	for _, r := range recs {
		h, _, err := runtime.DecodeRecord(r.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		info, ok := runtime.RawRecord{Headers: h, PartitionKey: aws.ToString(r.PartitionKey)}.DeadLetter()
		if !ok {
			e.t.Fatalf("dead letter without dead-letter headers: %v", h)
		}
		out = append(out, info)
	}
	return out
}

func failed(resp events.KinesisEventResponse) string {
	if len(resp.BatchItemFailures) == 0 {
		return ""
	}
	return resp.BatchItemFailures[0].ItemIdentifier
}

// The sample event of aws-lambda-go (events/testdata/kinesis-event.json,
// copied to testdata): two foreign plain records "Hello World". A raw
// subscriber gets both; a typed one rejects them as undecodable, to its
// dead-letter stream, and the batch succeeds (rejected is handled).
func TestSampleEvent(t *testing.T) {
	payload, err := os.ReadFile("testdata/kinesis-event.json")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := kinesislambda.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("raw", func(t *testing.T) {
		b := kinesistest.NewBroker()
		var got []string
		if _, err := runtime.Subscribe(b, "simple-stream", func(_ context.Context, r runtime.RawRecord, d runtime.Delivery) runtime.Outcome {
			got = append(got, string(r.Data)+"@"+d.ShardID)
			return runtime.Ack()
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := kinesislambda.Handler(b)(context.Background(), ev)
		if err != nil || failed(resp) != "" || resp.BatchItemFailures == nil {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
		if want := "Hello World@shardId-000000000000"; len(got) != 2 || got[0] != want || got[1] != want {
			t.Fatalf("handled %q", got)
		}
	})
	t.Run("typed", func(t *testing.T) {
		srv := kinesistest.New()
		_ = srv.AddStream("dl", 1)
		b := srv.NewBroker()
		if _, err := runtime.Subscribe(b, "simple-stream", func(context.Context, order, runtime.Delivery) runtime.Outcome {
			t.Error("handler called for an undecodable record")
			return runtime.Ack()
		}, runtime.DeadLetter("dl")); err != nil {
			t.Fatal(err)
		}
		resp, err := kinesislambda.Handler(b)(context.Background(), ev)
		if err != nil || failed(resp) != "" {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
		recs, _ := srv.Records("dl")
		if len(recs) != 2 {
			t.Fatalf("%d dead letters, want 2", len(recs))
		}
	})
}

// No poll, no lease: the broker is connected for publishing only, and one
// connection serves every warm invocation.
func TestNothingPolls(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int64
	e.subscribe(func(context.Context, order, runtime.Delivery) runtime.Outcome { n.Add(1); return runtime.Ack() })
	h := kinesislambda.Handler(e.b)
	for i := range 3 {
		if _, err := h(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{orderRecord(i, "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, op := range []kinesistest.Op{kinesistest.OpGetRecords, kinesistest.OpGetShardIterator, kinesistest.OpListShards} {
		if c := e.srv.Calls(op); c != 0 {
			t.Errorf("%v called %d times in Lambda mode", op, c)
		}
	}
	if n.Load() != 3 {
		t.Fatalf("handled %d, want 3", n.Load())
	}
}

// A failed record is reported (the earliest), later records already handled
// are handled again when the mapping resumes there, and nothing is lost.
func TestEarliestFailureResumes(t *testing.T) {
	e := newEnv(t)
	var refuse atomic.Bool
	refuse.Store(true)
	e.srv.InjectPutFault(func(stream, key string) error {
		if refuse.Load() && stream == "orders" {
			return errors.New("injected: put refused")
		}
		return nil
	})
	var mu sync.Mutex
	handled := map[string][]int{}
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		handled[o.Key] = append(handled[o.Key], o.N)
		mu.Unlock()
		if o.N == 2 && d.Attempt == 1 {
			return runtime.Retry() // its copy cannot be published while refused
		}
		return runtime.Ack()
	}, runtime.Workers(2), runtime.ByKey())
	keys := []string{"a", "b", "a", "b", "b", "b"}
	var recs []events.KinesisEventRecord
	for i, k := range keys {
		recs = append(recs, orderRecord(i, k))
	}
	h := kinesislambda.Handler(e.b, kinesislambda.WithMargin(time.Second))
	ctx, cancel := context.WithTimeout(e.ctx, 1500*time.Millisecond)
	resp, err := h(ctx, events.KinesisEvent{Records: recs})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failed(resp), recs[2].Kinesis.SequenceNumber; got != want || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("failures %+v, want only %s", resp.BatchItemFailures, want)
	}
	// The mapping resumes at record 2.
	refuse.Store(false)
	resp, err = h(e.ctx, events.KinesisEvent{Records: recs[2:]})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(handled["a"]); got != "[0 2 2]" {
		t.Errorf("key a handled %s, want [0 2 2]", got)
	}
	// b's records after the failed one may have run in the first
	// invocation (their lane is not a's): then they run again, in order.
	b := fmt.Sprint(handled["b"])
	if b != "[1 3 4 5 3 4 5]" && b != "[1 3 4 5]" && b != "[1 3 3 4 5]" && b != "[1 3 4 3 4 5]" {
		t.Errorf("key b handled %s", b)
	}
}

// A record that cannot start before the deadline less the margin is a
// failure; the invocation returns in time.
func TestDeadline(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int64
	const handling = 300 * time.Millisecond
	var overran atomic.Int64 // how much longer than handling the handlers ran, in all
	e.subscribe(func(context.Context, order, runtime.Delivery) runtime.Outcome {
		n.Add(1)
		began := time.Now()
		time.Sleep(handling)
		overran.Add(int64(time.Since(began) - handling))
		return runtime.Ack()
	})
	var recs []events.KinesisEventRecord
	for i := range 10 {
		recs = append(recs, orderRecord(i, "k"))
	}
	ctx, cancel := context.WithTimeout(e.ctx, 1500*time.Millisecond)
	defer cancel()
	began := time.Now()
	resp, err := kinesislambda.Handler(e.b, kinesislambda.WithMargin(time.Second))(ctx, events.KinesisEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	// Back before the deadline: the margin is for sending the response.
	// The handlers' own time past their 300 ms (a sleep that overruns on
	// a loaded machine: 1.65 s in all under CI load) is theirs, not the
	// invocation's: the deadline's bound is moved by it, one worker
	// running them one after the other.
	took := time.Since(began)
	over := time.Duration(overran.Load())
	t.Logf("took %v, the handlers %v of it past their %v each", took.Round(time.Millisecond), over.Round(time.Millisecond), handling)
	if took-over > 1400*time.Millisecond {
		t.Errorf("took %v, %v of it outside the handlers' %v each: to the deadline", took, took-over, handling)
	}
	i := int(n.Load())
	if i == 0 || i >= 10 || failed(resp) != recs[i].Kinesis.SequenceNumber {
		t.Fatalf("handled %d, failures %+v", i, resp.BatchItemFailures)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	var got []int
	e.subscribe(func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		got = append(got, o.N)
		return runtime.Ack()
	}, runtime.DeadLetter("dl"))
	h := kinesislambda.Handler(e.b)

	t.Run("zero records", func(t *testing.T) {
		resp, err := h(e.ctx, events.KinesisEvent{})
		if !errors.Is(err, kinesislambda.ErrBadEvent) || resp.BatchItemFailures != nil {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
	})
	t.Run("another source", func(t *testing.T) {
		r := orderRecord(0, "k")
		r.EventSource = "aws:sqs"
		if _, err := h(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{r}}); !errors.Is(err, kinesislambda.ErrBadEvent) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("unknown stream", func(t *testing.T) {
		got = nil
		recs := []events.KinesisEventRecord{orderRecord(0, "k"), record("other", 1, "k", []byte("{}")), orderRecord(2, "k")}
		resp, err := h(e.ctx, events.KinesisEvent{Records: recs})
		if err != nil || failed(resp) != recs[1].Kinesis.SequenceNumber {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
		if fmt.Sprint(got) != "[0]" { // record 2 is delivered again after 1
			t.Fatalf("handled %v", got)
		}
		// Without ReportBatchItemFailures on the mapping: an error.
		_, err = kinesislambda.Handler(e.b, kinesislambda.WithoutItemFailures())(e.ctx, events.KinesisEvent{Records: recs})
		var re *kinesislambda.RecordError
		if !errors.As(err, &re) || re.SequenceNumber != recs[1].Kinesis.SequenceNumber {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("undecodable and corrupt aggregate", func(t *testing.T) {
		got = nil
		agg := kpl.Aggregate([]kpl.Record{{PartitionKey: "k", Data: []byte(`{"n":1}`)}})
		agg[len(agg)-1] ^= 0xff // checksum
		// Beside good aggregates: the batch's checksums are checked at once.
		good := func(n int) []byte {
			return kpl.Aggregate([]kpl.Record{{PartitionKey: "k", Data: fmt.Appendf(nil, `{"n":%d}`, n)}, {PartitionKey: "k", Data: fmt.Appendf(nil, `{"n":%d}`, n+1)}})
		}
		recs := []events.KinesisEventRecord{record("orders", 0, "k", []byte("not json")), record("orders", 1, "k", good(10)), record("orders", 2, "k", agg), record("orders", 3, "k", good(12)), orderRecord(4, "k")}
		resp, err := h(e.ctx, events.KinesisEvent{Records: recs})
		if err != nil || failed(resp) != "" {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
		dls := e.deadLetters()
		if len(dls) != 2 || dls[0].SequenceNumber != recs[0].Kinesis.SequenceNumber || dls[1].SequenceNumber != recs[2].Kinesis.SequenceNumber || !strings.Contains(dls[1].Reason, "corrupt") {
			t.Fatalf("dead letters %+v", dls)
		}
		if fmt.Sprint(got) != "[10 11 12 13 4]" {
			t.Fatalf("handled %v", got)
		}
	})
}

// An aggregate is one event record: its sub-records are handled each
// under its own key, and one that fails fails the whole record.
func TestAggregate(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var got []string
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s%d/%s", o.Key, o.N, d.PartitionKey))
		mu.Unlock()
		return runtime.Ack()
	}, runtime.Workers(4), runtime.ByKey())
	var users []kpl.Record
	for i, k := range []string{"a", "b", "a", "c"} {
		data, _ := json.Marshal(order{Key: k, N: i})
		users = append(users, kpl.Record{PartitionKey: k, Data: data})
	}
	resp, err := kinesislambda.Handler(e.b)(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{record("orders", 0, "agg", kpl.Aggregate(users))}})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("handled %v", got)
	}
	ia, ib := -1, -1
	for i, s := range got {
		switch s {
		case "a0/a":
			ia = i
		case "a2/a":
			ib = i
		}
	}
	if ia < 0 || ib < ia {
		t.Fatalf("key a out of order or missing: %v", got)
	}
}

// putForeign writes records without an envelope, as another producer does.
func putForeign(e *env, os []order) {
	e.t.Helper()
	var entries []types.PutRecordsRequestEntry
	for _, o := range os {
		data, _ := json.Marshal(o)
		entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(o.Key), Data: data})
	}
	if _, err := e.srv.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: entries}); err != nil {
		e.t.Fatal(err)
	}
}

// The broker's middleware runs around every handling, as in the consumer.
func TestMiddleware(t *testing.T) {
	srv := kinesistest.New()
	_ = srv.AddStream("orders", 1)
	var mu sync.Mutex
	var seen []string
	b := srv.NewBroker(runtime.WithMiddleware(func(next runtime.HandleFunc) runtime.HandleFunc {
		return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s:%d", d.PartitionKey, msg.(order).N))
			mu.Unlock()
			return next(ctx, d, msg)
		}
	}))
	if _, err := runtime.Subscribe(b, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }); err != nil {
		t.Fatal(err)
	}
	resp, err := kinesislambda.Handler(b)(context.Background(), events.KinesisEvent{Records: []events.KinesisEventRecord{orderRecord(0, "x"), orderRecord(1, "y")}})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if fmt.Sprint(seen) != "[x:0 y:1]" {
		t.Fatalf("middleware saw %v", seen)
	}
}

// A broker that cannot connect fails the invocation whole (the mapping
// retries the batch), never an empty success; the next invocation tries
// again.
func TestConnectFails(t *testing.T) {
	b := kinesistest.NewBroker(runtime.WithApplication("bad/name"))
	h := kinesislambda.Handler(b)
	for range 2 {
		resp, err := h(context.Background(), events.KinesisEvent{Records: []events.KinesisEventRecord{orderRecord(0, "x")}})
		if !errors.Is(err, runtime.ErrInvalid) || resp.BatchItemFailures != nil {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
	}
}

// A subscriber mounted after the first invocation is handled too, and not
// started: nothing polls.
func TestLateMount(t *testing.T) {
	e := newEnv(t)
	h := kinesislambda.Handler(e.b)
	if resp, err := h(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{orderRecord(0, "x")}}); err != nil || failed(resp) == "" {
		t.Fatalf("before the mount: resp %+v, err %v", resp, err)
	}
	var n atomic.Int64
	e.subscribe(func(context.Context, order, runtime.Delivery) runtime.Outcome { n.Add(1); return runtime.Ack() })
	if resp, err := h(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{orderRecord(0, "x")}}); err != nil || failed(resp) != "" || n.Load() != 1 {
		t.Fatalf("after the mount: resp %+v, err %v, handled %d", resp, err, n.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if c := e.srv.Calls(kinesistest.OpListShards) + e.srv.Calls(kinesistest.OpGetShardIterator); c != 0 {
		t.Fatalf("the late subscription reads the stream: %d calls", c)
	}
}

func TestStreamOf(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:kinesis:us-east-1:123456789012:stream/orders":                        "orders",
		"arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/fn:1480641523": "orders",
		"arn:aws-cn:kinesis:cn-north-1:123456789012:stream/orders.v2":                 "orders.v2",
		"":       "",
		"orders": "",
		"arn:aws:kinesis:us-east-1:123456789012:stream/": "",
		"arn:aws:sqs:us-east-1:123456789012:queue":       "",
	} {
		got, err := kinesislambda.StreamOf(arn)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("StreamOf(%q) = %q, %v; want %q", arn, got, err, want)
		}
	}
	// A record with such an ARN fails the event whole.
	r := orderRecord(0, "k")
	r.EventSourceArn = "orders"
	e := newEnv(t)
	if _, err := kinesislambda.Handler(e.b)(e.ctx, events.KinesisEvent{Records: []events.KinesisEventRecord{r}}); !errors.Is(err, kinesislambda.ErrBadEvent) {
		t.Fatalf("err %v", err)
	}
}

// A subscriber mounted by the stream's ARN gets the stream's records, those
// an enhanced fan-out consumer's mapping delivers too; its deliveries name
// the stream as it was mounted.
func TestMountedByARN(t *testing.T) {
	srv := kinesistest.New()
	_ = srv.AddStream("orders", 1)
	arn := "arn:aws:kinesis:us-east-1:000000000000:stream/orders"
	b := srv.NewBroker()
	var got []string
	if _, err := runtime.Subscribe(b, arn, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		got = append(got, d.Stream)
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	r0, r1 := orderRecord(0, "k"), orderRecord(1, "k")
	r1.EventSourceArn = arn + "/consumer/fn:1480641523"
	resp, err := kinesislambda.Handler(b)(context.Background(), events.KinesisEvent{Records: []events.KinesisEventRecord{r0, r1}})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if fmt.Sprint(got) != "["+arn+" "+arn+"]" {
		t.Fatalf("deliveries name %v", got)
	}
}
