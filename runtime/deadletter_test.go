package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// unpublishableKeys are KPL sub-record keys the service refuses as record
// keys: a Retry copy or a dead letter cannot go out under them.
var unpublishableKeys = []string{"", strings.Repeat("k", 300), "bad-\xff\xfe"}

// putAggregate writes one KPL aggregate of orders 1..n, order i under keys[i-1].
func (e *env) putAggregate(stream string, keys []string) {
	e.t.Helper()
	var users []kpl.Record
	for i, key := range keys {
		data, _ := json.Marshal(order{ID: i + 1, Customer: "c"})
		users = append(users, kpl.Record{PartitionKey: key, Data: data})
	}
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("agg"), Data: kpl.Aggregate(users)}); err != nil {
		e.t.Fatal(err)
	}
}

// readRaw subscribes b to stream from its horizon with a handler that hands
// each record on, raw, to the returned channel (of buffer n).
func readRaw(e *env, b *runtime.Broker, stream string, n int) <-chan runtime.RawRecord {
	e.t.Helper()
	ch := make(chan runtime.RawRecord, n)
	mustSubscribe(e, b, stream, func(_ context.Context, r runtime.RawRecord, _ runtime.Delivery) runtime.Outcome {
		ch <- r
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	return ch
}

// refuseCopies makes srv let the first put to stream through (the
// original record) and refuse every later one (its retry copies) with
// err, telling of each refusal on the returned channel while it has room.
func refuseCopies(srv *kinesistest.Server, stream string, err error) <-chan struct{} {
	var puts atomic.Int64
	refused := make(chan struct{}, 64)
	srv.InjectPutFault(func(s, key string) error {
		if s == stream && puts.Add(1) > 1 {
			select {
			case refused <- struct{}{}:
			default:
			}
			return err
		}
		return nil
	})
	return refused
}

// Issue 9, scenario 6: a record whose key cannot be published (a KPL
// sub-record's empty, over-256-unit or invalid UTF-8 key) that asks for a
// Retry, or is rejected, reaches the dead-letter stream under a valid key
// with its original key in a header, and the shard goes on.
func TestUnpublishableKeysAreDeadLettered(t *testing.T) {
	testUnpublishableKeysAreDeadLettered(newEnv(t))
}

func testUnpublishableKeysAreDeadLettered(e *env) {
	t := e.t
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	seen := make(chan runtime.Delivery, 16)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		switch o.ID {
		case 1, 3:
			return runtime.OutcomeOf(errors.New("db down"))
		case 2:
			return runtime.Reject(errors.New("unknown customer"))
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq))
	dead := readRaw(e, b, dlq, 16)
	e.connect(b)
	e.putAggregate(orders, append(unpublishableKeys[:len(unpublishableKeys):len(unpublishableKeys)], "alice"))
	e.publish(e.publisher(orders), order{ID: 5, Customer: "bob"})

	// Each bad record is handled once (no retry copy can exist), then the
	// shard goes on to alice's record and to bob's, published after.
	got := receive(e, seen, 5)
	for i, d := range got {
		if d.Attempt != 1 {
			t.Fatalf("delivery %d has attempt %d: a copy was published", i, d.Attempt)
		}
	}
	if got[3].PartitionKey != "alice" || got[4].PartitionKey != "bob" {
		t.Fatalf("the shard did not go on past the bad keys: deliveries %+v", got)
	}
	letters := receive(e, dead, len(unpublishableKeys))
	for _, want := range unpublishableKeys {
		var found bool
		for _, r := range letters {
			dl, ok := r.DeadLetter()
			if !ok || dl.PartitionKey != want {
				continue
			}
			found = true
			if k := r.PartitionKey; k == "" || len(k) > runtime.MaxPartitionKeyLength || !utf8.ValidString(k) {
				t.Errorf("dead letter of key %q went under key %q", want, k)
			}
			if dl.Stream != orders || dl.Reason == "" {
				t.Errorf("dead letter of key %q: %+v", want, dl)
			}
		}
		if !found {
			t.Errorf("no dead letter carries the original key %q; got %d letters", want, len(letters))
		}
	}
}

// Without a dead-letter stream such a record is logged and checkpointed past.
func TestUnpublishableKeyWithoutDeadLetterIsCheckpointedPast(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	seen := make(chan runtime.Delivery, 16)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		if o.ID == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	e.putAggregate(orders, []string{""})
	e.publish(e.publisher(orders), order{ID: 2, Customer: "bob"})
	if got := receive(e, seen, 2); got[1].PartitionKey != "bob" {
		t.Fatalf("deliveries %+v: the shard did not go on past the empty key", got)
	}
	if line := e.logs.line("record rejected and checkpointed past"); !strings.Contains(line, "cannot be retried under its partition key") {
		t.Fatalf("rejection log %q", line)
	}
}

// Issue 9, scenario 14: a poison record of the largest size reaches the
// dead-letter stream, its payload cut to fit the dead-letter headers: the
// payload's first bytes, its size and its origin.
func TestLargestPoisonRecordIsDeadLetteredTruncated(t *testing.T) {
	testLargestPoisonRecordIsDeadLetteredTruncated(newEnv(t))
}

func testLargestPoisonRecordIsDeadLetteredTruncated(e *env) {
	t := e.t
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	seen := make(chan runtime.Delivery, 4)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		if o.ID == 1 {
			return runtime.Reject(errors.New("poison"))
		}
		return runtime.Ack()
	}, runtime.DeadLetter(dlq))
	dead := readRaw(e, b, dlq, 4)
	e.connect(b)
	pub := e.publisher(orders)
	key := "alice"
	big := order{ID: 1, Customer: strings.Repeat("x", runtime.MaxRecordSize-len(key)-len(`{"id":1,"customer":""}`))}
	payload, _ := json.Marshal(big)
	if err := pub.Message(big).PartitionKey(key).Publish(e.ctx); err != nil {
		t.Fatalf("publishing a record of the largest size: %v", err)
	}
	e.publish(pub, order{ID: 2, Customer: key})
	got := receive(e, seen, 2)
	r := receive(e, dead, 1)[0]
	dl, ok := r.DeadLetter()
	if !ok || dl.Reason != "poison" || dl.Stream != orders || dl.SequenceNumber != got[0].SequenceNumber || dl.PartitionKey != key {
		t.Fatalf("dead letter %+v (ok %v), want reason poison from %s/%s", dl, ok, orders, got[0].SequenceNumber)
	}
	if dl.TruncatedFrom != len(payload) || len(r.Data) >= len(payload) || len(r.Data) < len(payload)-1024 || !bytes.HasPrefix(payload, r.Data) {
		t.Fatalf("dead letter carries %d bytes, truncated from %d; want the first bytes of the %d-byte payload", len(r.Data), dl.TruncatedFrom, len(payload))
	}
	if r.Headers[runtime.TruncatedFromHeader] == "" {
		t.Fatalf("no %s header: %v", runtime.TruncatedFromHeader, r.Headers)
	}
}

// A retry copy the service refuses for a reason the operator can fix (a
// KMS key access denied) is not given up: the original stays unsettled
// and its copy goes out once the service accepts it.
func TestRetryCopyRefusedByConfigurationWaitsInsteadOfGivingUp(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)
	refused := refuseCopies(srv, orders, &types.KMSAccessDeniedException{Message: aws.String("injected")})
	seen := make(chan runtime.Delivery, 8)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		seen <- d
		if d.Attempt == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	})
	e.connect(b)
	e.publish(e.publisher(orders), order{ID: 1, Customer: "alice"})
	receive(e, seen, 1)
	receive(e, refused, 2) // refused, and tried again
	srv.InjectPutFault(nil)
	if d := receive(e, seen, 1)[0]; d.Attempt != 2 {
		t.Fatalf("after the service accepted the copy: delivery %+v, want attempt 2", d)
	}
	if line := e.logs.line("record rejected"); line != "" {
		t.Fatalf("the record was given up: %s", line)
	}
}

// A corrupt KPL aggregate (its MD5 trailer does not match) goes to the
// dead-letter stream whole, with a reason that names it, and the shard goes
// on to the next record.
// It runs on kinesalite and kinesis-mock too (TestSubscriptionFlowsOn*).
func TestCorruptAggregateIsDeadLetteredWithItsReason(t *testing.T) {
	testCorruptAggregateIsDeadLettered(newEnv(t))
}

func testCorruptAggregateIsDeadLettered(e *env) {
	t := e.t
	orders, dlq := e.newStream("orders", 1), e.newStream("orders-dlq", 1)
	seen := make(chan int, 4)
	b := e.broker()
	mustSubscribe(e, b, orders, func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		seen <- o.ID
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dlq))
	dead := readRaw(e, b, dlq, 4)
	e.connect(b)
	data, _ := json.Marshal(order{ID: 1, Customer: "alice"})
	agg := kpl.Aggregate([]kpl.Record{{PartitionKey: "alice", Data: data}})
	agg[len(agg)-1] ^= 0xff // the MD5 trailer no longer matches
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("agg"), Data: agg}); err != nil {
		t.Fatal(err)
	}
	e.publish(e.publisher(orders), order{ID: 2, Customer: "bob"})
	if got := receive(e, seen, 1); got[0] != 2 {
		t.Fatalf("handled %v, want only order 2 after the corrupt aggregate", got)
	}
	r := receive(e, dead, 1)[0]
	info, ok := r.DeadLetter()
	if !ok || !strings.Contains(info.Reason, "corrupt aggregated record: MD5 mismatch") || !bytes.Equal(r.Data, agg) {
		t.Fatalf("dead letter %q with reason %q, want the aggregate whole and a reason naming it", r.Data, info.Reason)
	}
}
