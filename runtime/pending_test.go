package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestStartAllWaitStoppedMidBatch: a batch's Wait, counting its messages
// down as a whole, whose ctx ends while the batch is part stored, part in
// flight and part queued, still tells each message what became of it: the
// stored one its receipt (a result never reported lost), the one in
// flight that it may have been written, the one behind it that it was
// not sent.
func TestStartAllWaitStoppedMidBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 1)
	held, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	s.InjectPutFault(func(_, key string) error {
		if key == "k" && calls.Add(1) == 2 { // k's second message: held in flight
			close(held)
			<-release
		}
		return nil
	})
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithoutAggregation())
	batchCtx, giveUp := context.WithCancel(ctx)
	// One key: each message goes once the one before it is stored.
	pd := runtime.StartAll(batchCtx, []*runtime.Message[aggMsg]{
		p.Message(aggMsg{Key: "k", N: 0}).PartitionKey("k"),
		p.Message(aggMsg{Key: "k", N: 1}).PartitionKey("k"),
		p.Message(aggMsg{Key: "k", N: 2}).PartitionKey("k"),
	})
	<-held
	waited := make(chan struct{})
	var receipts []runtime.Receipt
	var err error
	go func() {
		defer close(waited)
		receipts, err = pd.Wait()
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned with a message in flight and its ctx alive")
	case <-time.After(20 * time.Millisecond):
	}
	giveUp()
	<-waited
	if len(receipts) != 3 || receipts[0].SequenceNumber == "" || receipts[0].PartitionKey != "k" {
		t.Fatalf("receipts %+v: want the stored message's, first", receipts)
	}
	if receipts[1] != (runtime.Receipt{}) || receipts[2] != (runtime.Receipt{}) {
		t.Errorf("receipts of messages not known stored: %+v, %+v; want zero", receipts[1], receipts[2])
	}
	errs := strings.Split(fmt.Sprint(err), "\n")
	if !errors.Is(err, runtime.ErrPublish) || len(errs) != 2 ||
		!strings.Contains(errs[0], "may have been written") || !strings.Contains(errs[1], "not sent") {
		t.Errorf("Wait: %v; want ErrPublish twice: the message in flight may have been written, the one behind it not sent", err)
	}
	if again, errAgain := pd.Wait(); !slices.Equal(again, receipts) || fmt.Sprint(errAgain) != fmt.Sprint(err) {
		t.Errorf("waited for again: %+v, %v; want what the first Wait gave", again, errAgain)
	}
}
