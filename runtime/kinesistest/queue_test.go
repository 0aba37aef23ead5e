package kinesistest_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"testing/synctest"
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
	arn := workQueue(t, s, &types.QueueAttributes{
		VisibilityTimeoutSeconds: aws.Int32(10),
		DeadLetterConfiguration:  &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(2)},
	})
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
	if c, ok := s.QueueCounts(arn); !ok || c != (kinesistest.QueueCounts{InFlight: 2}) {
		t.Fatalf("QueueCounts with 2 in flight: %+v %v", c, ok)
	}
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
	if c, _ := s.QueueCounts(arn); c != (kinesistest.QueueCounts{DeadLetters: 1}) {
		t.Fatalf("QueueCounts with 1 dead letter: %+v", c)
	}
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

// A queue delivers the records of shards made by a split as well as its
// parents', stops delivering records that left retention, and an
// AT_TIMESTAMP queue starts at its time.
func TestQueueReshardRetentionAndTimestamp(t *testing.T) {
	ctx := testCtx(t)
	c := newClock()
	s := kinesistest.New(kinesistest.WithClock(c.Now), kinesistest.WithRetention(time.Hour))
	if err := s.AddOnDemandStream("q"); err != nil {
		t.Fatal(err)
	}
	put(t, s, "q", "a", "old")
	c.Advance(time.Minute)
	mid := c.Now()
	arn, err := s.AddQueue("q", "all", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("q")})
	if err != nil {
		t.Fatal(err)
	}
	at, err := s.CreateQueue(ctx, &kinesis.CreateQueueInput{QueueName: aws.String("since"), StreamConfigurationList: []types.QueueStreamConfiguration{{
		StreamARN:        d.StreamDescriptionSummary.StreamARN,
		StartingPosition: &types.QueueStartingPosition{Type: types.QueueStartingPositionTypeAtTimestamp, Timestamp: &mid},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SplitInHalf("q", "shardId-000000000000"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, s, "q", fmt.Sprintf("k%d", i), "new")
	}
	count := func(arn string) map[string]int {
		got := map[string]int{}
		for {
			out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0), VisibilityTimeoutSeconds: aws.Int32(1)})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.QueueRecords) == 0 {
				return got
			}
			for _, r := range out.QueueRecords {
				got[string(r.Data)]++
			}
		}
	}
	if got := count(arn); got["old"] != 1 || got["new"] != 20 {
		t.Errorf("TRIM_HORIZON queue across a split received %v, want old 1 and new 20", got)
	}
	if got := count(aws.ToString(at.QueueDescription.QueueARN)); got["old"] != 0 || got["new"] != 20 {
		t.Errorf("AT_TIMESTAMP queue received %v, want new 20 only", got)
	}
	c.Advance(2 * time.Hour) // past retention and every visibility timeout
	if got := count(arn); len(got) != 0 {
		t.Errorf("records past retention were delivered: %v", got)
	}
}

// Eight consumers receiving and acknowledging at once while a producer
// writes: every record is delivered, none to two consumers at once, and
// the queue ends empty.
func TestQueueConcurrentConsumers(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	arn := workQueue(t, s, nil)
	const n = 2000
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(1)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(out.QueueRecords) == 0 {
					continue
				}
				in := &kinesis.AcknowledgeQueueRecordsInput{QueueARN: &arn}
				mu.Lock()
				for _, r := range out.QueueRecords {
					seen[string(r.Data)]++
					in.Entries = append(in.Entries, types.AcknowledgeQueueRecordsRequestEntry{ReceiptHandle: r.ReceiptHandle})
				}
				mu.Unlock()
				res, err := s.AcknowledgeQueueRecords(ctx, in)
				if err != nil || len(res.Failed) != 0 {
					t.Errorf("ack: %v %+v", err, res)
					return
				}
			}
		})
	}
	for i := range n {
		put(t, s, "q", fmt.Sprintf("k%d", i%37), fmt.Sprintf("r%d", i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d records delivered", len(seen), n)
	}
	for d, c := range seen {
		if c != 1 {
			t.Errorf("record %s delivered %d times (visibility 30 s, acknowledged at once)", d, c)
		}
	}
	if c, _ := s.QueueCounts(arn); c != (kinesistest.QueueCounts{}) {
		t.Errorf("queue not empty: %+v", c)
	}
}

// A dead letter restored and dead again is received once per call, also
// with visibility 0 (it was listed twice in the dead letters' queue).
func TestQueueDeadLetterDiedTwiceReceivedOnce(t *testing.T) {
	ctx := testCtx(t)
	s := kinesistest.New()
	arn := workQueue(t, s, &types.QueueAttributes{DeadLetterConfiguration: &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(1)}})
	put(t, s, "q", "k", "poison")
	kill := func() {
		t.Helper()
		out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
		if err != nil || len(out.QueueRecords) != 1 {
			t.Fatalf("receive: %v %+v", err, out)
		}
		if _, err := s.UpdateQueueRecordsVisibility(ctx, &kinesis.UpdateQueueRecordsVisibilityInput{QueueARN: &arn, Entries: []types.UpdateQueueRecordsVisibilityRequestEntry{{ReceiptHandle: out.QueueRecords[0].ReceiptHandle, VisibilityTimeoutSeconds: aws.Int32(0)}}}); err != nil {
			t.Fatal(err)
		}
	}
	dead := func() []types.QueueRecord {
		t.Helper()
		out, err := s.ReceiveDeadLetterQueueRecords(ctx, &kinesis.ReceiveDeadLetterQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0), VisibilityTimeoutSeconds: aws.Int32(0)})
		if err != nil {
			t.Fatal(err)
		}
		return out.QueueRecords
	}
	kill()
	d := dead() // visibility 0: still a visible dead letter
	if _, err := s.RestoreDeadLetterQueueRecords(ctx, &kinesis.RestoreDeadLetterQueueRecordsInput{QueueARN: &arn, Entries: []types.RestoreDeadLetterQueueRecordsRequestEntry{{ReceiptHandle: d[0].ReceiptHandle}}}); err != nil {
		t.Fatal(err)
	}
	kill()
	if got := dead(); len(got) != 1 {
		t.Fatalf("one dead letter received %d times in one call", len(got))
	}
}

// A receive whose caller gives up (its context ends, as a closed
// connection ends a real request) takes nothing once it runs, though a
// record became visible just before: the record stays visible, received
// once, for the next receive. Before, a waiting receive that found both
// its wake-ups ready picked either at random, and took the record for
// nobody (in flight for its visibility timeout, one receive more toward
// the dead letters) half the time: 20 rounds leave that to chance once in
// a million.
func TestQueueReceiveCancelledTakesNothing(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			s := kinesistest.New()
			arn := workQueue(t, s, nil)
			waiting, cancel := context.WithCancel(ctx)
			answered := make(chan int, 1)
			go func() {
				out, err := s.ReceiveQueueRecords(waiting, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(5)})
				n := -1 // an error
				if err == nil {
					n = len(out.QueueRecords)
				}
				answered <- n
			}()
			synctest.Wait() // the receive waits
			// A record arrives and the caller gives up before the
			// receive runs again (one P: this goroutine goes on until it
			// blocks), so it finds both its wake-ups ready.
			put(t, s, "q", "k", "one")
			cancel()
			if n := <-answered; n > 0 {
				t.Fatalf("round %d: a receive whose caller gave up took %d records", round, n)
			}
			out, err := s.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(0)})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.QueueRecords) != 1 || aws.ToInt32(out.QueueRecords[0].ReceiveCount) != 1 {
				t.Fatalf("round %d: %d records, want 1 received once", round, len(out.QueueRecords))
			}
		})
	}
}

// workQueue adds the on-demand stream "q" to s and its queue "work" with
// attrs, and returns the queue's ARN.
func workQueue(t *testing.T, s *kinesistest.Server, attrs *types.QueueAttributes) string {
	t.Helper()
	if err := s.AddOnDemandStream("q"); err != nil {
		t.Fatal(err)
	}
	arn, err := s.AddQueue("q", "work", attrs)
	if err != nil {
		t.Fatal(err)
	}
	return arn
}
