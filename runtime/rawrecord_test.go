package runtime_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// TestDeadLetterReaderGetsEveryRecordRaw: records dead-lettered because
// they could not be decoded are read from the dead-letter stream by a
// RawRecord subscriber of the same broker, with their bytes, key, headers
// and origin; a record there that is not even a readable envelope is
// handed over too. Nothing is dropped twice.
func TestDeadLetterReaderGetsEveryRecordRaw(t *testing.T) {
	e := newEnv(t)
	orders, dlq := e.stream("orders"), e.stream("orders-dlq")
	e.createStream(orders, 1)
	e.createStream(dlq, 1)
	h, ch := collect()
	b := e.broker()
	if _, err := subscribe(e, b, orders, h, runtime.DeadLetter(dlq)); err != nil {
		t.Fatal(err)
	}
	raws := make(chan runtime.RawRecord, 8)
	if _, err := subscribe(e, b, dlq, func(_ context.Context, rec runtime.RawRecord, d runtime.Delivery) runtime.Outcome {
		if rec.PartitionKey != d.PartitionKey {
			t.Errorf("RawRecord key %q, delivery key %q", rec.PartitionKey, d.PartitionKey)
		}
		raws <- rec
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	e.connect(b)

	bad := [][]byte{
		[]byte("not json {"),
		{0xFE, 'k', 'g', 'E', 9, 0}, // an envelope of an unknown version
	}
	for _, data := range bad {
		if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(orders), PartitionKey: aws.String("alice"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	for i, rec := range receive(e, raws, 2) {
		if !bytes.Equal(rec.Data, bad[i]) || rec.PartitionKey != "alice" {
			t.Fatalf("dead letter %d: %q under %q, want the original %q under alice", i, rec.Data, rec.PartitionKey, bad[i])
		}
		dl, ok := rec.DeadLetter()
		if !ok || !strings.Contains(dl.Reason, "decode") || dl.Stream != orders || dl.ShardID == "" || dl.SequenceNumber == "" || dl.Attempts != 1 {
			t.Fatalf("dead letter %d says %+v (ok %v); want a decode reason and its origin on %s", i, dl, ok, orders)
		}
	}
	if len(ch) != 0 {
		t.Fatalf("the typed handler got an undecodable record")
	}

	// A record on the dead-letter stream that is not a readable envelope
	// cannot be dead-lettered again: the raw reader gets its bytes as they are.
	foreign := []byte{0xFE, 'k', 'g', 'E', 7}
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(dlq), PartitionKey: aws.String("bob"), Data: foreign}); err != nil {
		t.Fatal(err)
	}
	rec := receive(e, raws, 1)[0]
	if !bytes.Equal(rec.Data, foreign) || rec.Headers != nil || rec.PartitionKey != "bob" {
		t.Fatalf("unreadable envelope handed over as %+v, want its bytes as stored", rec)
	}
	if _, ok := rec.DeadLetter(); ok {
		t.Fatal("a record without dead-letter headers reads as a dead letter")
	}
}
