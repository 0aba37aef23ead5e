package runtime_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// TestRawReaderGetsUnreadableEnvelopes: a record that is not even a
// readable envelope cannot be dead-lettered again from a dead-letter stream;
// a RawRecord reader gets its bytes as they are stored, and nothing is
// dropped twice.
func TestRawReaderGetsUnreadableEnvelopes(t *testing.T) {
	e := newEnv(t)
	dlq := e.newStream("dlq", 1)
	raws := make(chan runtime.RawRecord, 1)
	b := e.broker()
	mustSubscribe(e, b, dlq, func(_ context.Context, rec runtime.RawRecord, _ runtime.Delivery) runtime.Outcome {
		raws <- rec
		return runtime.Ack()
	})
	e.connect(b)
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
