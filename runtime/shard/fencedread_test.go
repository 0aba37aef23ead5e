package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// heldRead holds the first GetRecords call made once armed until release
// is closed, then answers it from the backend whatever became of its
// context: the answer of a call that was out when its lease was fenced,
// arriving in the moment before the reader's session is cancelled (the
// fence cancels it from another goroutine).
type heldRead struct {
	kinesisapi.API
	armed   atomic.Bool
	held    chan struct{} // closed when the armed call is held
	release chan struct{}
}

func (h *heldRead) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if !h.armed.CompareAndSwap(true, false) {
		return h.API.GetRecords(ctx, in, opts...)
	}
	close(h.held)
	<-h.release
	return h.API.GetRecords(context.WithoutCancel(ctx), in, opts...)
}

// A reader fenced while its GetRecords call was out hands out nothing the
// call returns: the fenced owner delivers nothing between its fence and
// its take-back, and the take-back delivers the fence's records once.
// (Before 94ed856 the reader handed the answer to the sink, and per lease
// TestReshardWhileFencedThenTakenBack saw the take-back deliver the same
// records again about once in 40 runs.)
func TestFencedReaderHandsOutNothingReadAfterTheFence(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, srv := memEnvIn(t, 1, l)
		hold := &heldRead{API: srv, held: make(chan struct{}), release: make(chan struct{})}
		e.coordClient = hold
		ids := e.shards()
		col := newCollector()
		a, store := fencedOwner(e, "a", col)
		want := e.feed(a, ids, col, 10, 5)
		waitCheckpointed(t, e, col, ids)

		hold.armed.Store(true)
		select {
		case <-hold.held:
		case <-time.After(5 * time.Second):
			t.Fatal("no GetRecords call within 5s")
		}
		e.publish(want, 10, 5) // the held call's answer holds these
		fence(t, a, store)
		before := len(col.records())
		close(hold.release)
		time.Sleep(3 * e.config("", nil).Poll) // the answer would be handed out by now
		if got := col.records()[before:]; len(got) > 0 {
			t.Fatalf("the fenced reader handed out %d records after its fence, first %s", len(got), got[0].Data)
		}

		store.off.Store(false)
		eventually(t, 10*time.Second, "a reads the shard again", func() bool { return slices.Equal(a.Reading(), ids) })
		col.wait(t, 10*time.Second, fmt.Sprintf("the %d records", 20), func(r []*shard.Record) bool { return len(r) >= 20 })
		time.Sleep(3 * e.config("", nil).Poll) // a duplicate would be here by now
		checkKeyOrder(t, col.records(), want)
	})
}
