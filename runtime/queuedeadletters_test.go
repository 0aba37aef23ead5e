package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// deadLetterQueue makes a queue whose records die at their first
// unacknowledged receive, writes n records and kills them all.
func deadLetterQueue(t *testing.T, s *kinesistest.Server, n int) string {
	t.Helper()
	ctx := context.Background()
	if err := s.AddOnDemandStream("dlq"); err != nil {
		t.Fatal(err)
	}
	arn, err := s.AddQueue("dlq", "work", &types.QueueAttributes{DeadLetterConfiguration: &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(1)}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("dlq"), PartitionKey: aws.String("k"), Data: fmt.Appendf(nil, "r%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < n; {
		out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
		if err != nil || len(out.QueueRecords) == 0 {
			t.Fatalf("receive: %v, %d records", err, got)
		}
		in := &kinesis.UpdateQueueRecordsVisibilityInput{QueueARN: &arn}
		for _, r := range out.QueueRecords {
			in.Entries = append(in.Entries, types.UpdateQueueRecordsVisibilityRequestEntry{ReceiptHandle: r.ReceiptHandle, VisibilityTimeoutSeconds: aws.Int32(0)})
		}
		if _, err := s.UpdateQueueRecordsVisibility(ctx, in); err != nil {
			t.Fatal(err)
		}
		got += len(out.QueueRecords)
	}
	return arn
}

func letterData(ls []runtime.QueueDeadLetter) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l.Data)
	}
	sort.Strings(out)
	return out
}

// A queue's dead letters are listed, held, released, acknowledged and
// restored from Go, by the queue's name or ARN.
func TestQueueDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s := kinesistest.NewBrokerServer()
	if _, err := b.QueueDeadLetters(ctx, "work"); !errors.Is(err, runtime.ErrNotConnected) {
		t.Fatalf("before Connect: %v, want ErrNotConnected", err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	arn := deadLetterQueue(t, s, 12)

	for _, bad := range []string{"", "bad name", "arn:aws:kinesis:us-east-1:1:queue/x"} {
		if _, err := b.QueueDeadLetters(ctx, bad); !errors.Is(err, runtime.ErrInvalid) {
			t.Errorf("QueueDeadLetters(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := b.QueueDeadLetters(ctx, "nobody"); !errors.Is(err, runtime.ErrStream) {
		t.Errorf("QueueDeadLetters of a name no queue has: %v, want ErrStream", err)
	}
	dl, err := b.QueueDeadLetters(ctx, "work")
	if err != nil || dl.ARN() != arn {
		t.Fatalf("QueueDeadLetters by name: %v, ARN %q want %q", err, dl.ARN(), arn)
	}
	if _, err := dl.Receive(ctx, 0, 0); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("Receive max 0: %v, want ErrInvalid", err)
	}

	// All 12 listed (two calls), held: a second listing is empty.
	all, err := dl.Receive(ctx, 100, time.Minute)
	if err != nil || len(all) != 12 {
		t.Fatalf("Receive: %v, %d letters, want 12", err, len(all))
	}
	if l := all[0]; l.ReceiveCount != 1 || l.RecordID == "" || l.PartitionKey != "k" || l.ArrivedAt.IsZero() || l.FirstReceiveAt.IsZero() {
		t.Errorf("a letter: %+v", l)
	}
	if more, err := dl.Receive(ctx, 100, 0); err != nil || len(more) != 0 {
		t.Fatalf("Receive while held: %v, %d letters", err, len(more))
	}

	// Released, listed again; then 2 restored, 10 discarded.
	if err := dl.Release(ctx, all...); err != nil {
		t.Fatal(err)
	}
	all, err = dl.Receive(ctx, 100, time.Minute)
	if err != nil || len(all) != 12 {
		t.Fatalf("Receive after Release: %v, %d letters", err, len(all))
	}
	sort.Slice(all, func(i, j int) bool { return string(all[i].Data) < string(all[j].Data) })
	if err := dl.Restore(ctx, all[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := dl.Acknowledge(ctx, all[2:]...); err != nil {
		t.Fatal(err)
	}
	// Acted on twice: the restored ones' handles are spent.
	err = dl.Restore(ctx, all[:2]...)
	if !errors.Is(err, runtime.ErrRead) {
		t.Errorf("restoring twice: %v, want ErrRead naming the records", err)
	}
	if err := dl.Acknowledge(ctx, runtime.QueueDeadLetter{RecordID: "made-up"}); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("acknowledging a letter Receive did not return: %v, want ErrInvalid", err)
	}
	out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, r := range out.QueueRecords {
		live = append(live, string(r.Data))
		if aws.ToInt32(r.ReceiveCount) != 1 {
			t.Errorf("a restored record received with count %d", aws.ToInt32(r.ReceiveCount))
		}
	}
	sort.Strings(live)
	if fmt.Sprint(live) != "[r00 r01]" {
		t.Errorf("restored records received: %v, want [r00 r01]", live)
	}
	if rest, err := dl.Receive(ctx, 100, 0); err != nil || len(rest) != 0 {
		t.Errorf("dead letters left: %v, %v", err, letterData(rest))
	}
}
