package kinesistest_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// A queue's records come back after their visibility timeout on the
// server's clock, count their receives, and become dead letters at
// MaxReceiveCount; a restored dead letter is received again.
func TestQueueVisibilityAndDeadLetters(t *testing.T) {
	ctx := testCtx(t)
	c := newClock()
	s := kinesistest.New(kinesistest.WithClock(c.Now))
	if err := s.AddOnDemandStream("q"); err != nil {
		t.Fatal(err)
	}
	arn, err := s.AddQueue("q", "work", &types.QueueAttributes{
		VisibilityTimeoutSeconds: aws.Int32(10),
		DeadLetterConfiguration:  &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "q", "k", "poison")
	put(t, s, "q", "k", "fine")
	receive := func(want int) []types.QueueRecord {
		t.Helper()
		out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.QueueRecords) != want {
			t.Fatalf("received %d records, want %d", len(out.QueueRecords), want)
		}
		return out.QueueRecords
	}
	recs := receive(2)
	receive(0) // in flight
	for _, r := range recs {
		if string(r.Data) == "fine" {
			ack, err := s.AcknowledgeQueueRecords(ctx, &kinesis.AcknowledgeQueueRecordsInput{QueueARN: &arn, Entries: []types.AcknowledgeQueueRecordsRequestEntry{{ReceiptHandle: r.ReceiptHandle}}})
			if err != nil || len(ack.Successful) != 1 {
				t.Fatalf("ack: %v %+v", err, ack)
			}
		}
	}
	c.Advance(11 * time.Second)
	again := receive(1)
	if string(again[0].Data) != "poison" || aws.ToInt32(again[0].ReceiveCount) != 2 || aws.ToString(again[0].RecordId) != aws.ToString(recs[0].RecordId) {
		t.Fatalf("second receive %+v", again[0])
	}
	c.Advance(11 * time.Second)
	receive(0) // received twice: now a dead letter
	dl, err := s.ReceiveDeadLetterQueueRecords(ctx, &kinesis.ReceiveDeadLetterQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
	if err != nil || len(dl.QueueRecords) != 1 || string(dl.QueueRecords[0].Data) != "poison" {
		t.Fatalf("dead letters: %v %+v", err, dl)
	}
	res, err := s.RestoreDeadLetterQueueRecords(ctx, &kinesis.RestoreDeadLetterQueueRecordsInput{QueueARN: &arn, Entries: []types.RestoreDeadLetterQueueRecordsRequestEntry{{ReceiptHandle: dl.QueueRecords[0].ReceiptHandle}}})
	if err != nil || len(res.Successful) != 1 {
		t.Fatalf("restore: %v %+v", err, res)
	}
	back := receive(1)
	if aws.ToInt32(back[0].ReceiveCount) != 1 {
		t.Fatalf("restored record received with count %d, want 1", aws.ToInt32(back[0].ReceiveCount))
	}
}
