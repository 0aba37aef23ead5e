package shard_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// hold holds the first read made once armed until release is closed.
type hold struct {
	armed   atomic.Bool
	held    chan struct{} // closed when the armed read is held
	release chan struct{}
}

func newHold() *hold { return &hold{held: make(chan struct{}), release: make(chan struct{})} }

// take holds the calling read until release if it is the armed one, and
// reports whether it was.
func (h *hold) take() bool {
	if !h.armed.CompareAndSwap(true, false) {
		return false
	}
	close(h.held)
	<-h.release
	return true
}

// heldRead holds the first GetRecords call made once armed until release
// is closed, then answers it from the backend whatever became of its
// context: the answer of a call that was out when its lease was fenced,
// arriving in the moment before the reader's session is cancelled (the
// fence cancels it from another goroutine).
type heldRead struct {
	kinesisapi.API
	*hold
}

func (h heldRead) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if h.take() {
		ctx = context.WithoutCancel(ctx)
	}
	return h.API.GetRecords(ctx, in, opts...)
}

// heldEvents is heldRead for enhanced fan-out: it holds the first
// SubscribeToShard event with records that comes once armed until release
// is closed, then hands it to the reader whatever became of the
// subscription: the event a reader took from its subscription in the
// moment before the fence's cancellation of its session closed it. (The
// SDK's own stream, closed meanwhile, drops or hands over an event it
// holds at random.)
type heldEvents struct {
	kinesisapi.API
	*hold
}

func (h heldEvents) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	out, err := h.API.SubscribeToShard(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	r := &heldStream{hold: h.hold, in: out.GetStream(), ch: make(chan types.SubscribeToShardEventStream), done: make(chan struct{})}
	go r.pipe()
	return outputOf(kinesis.NewSubscribeToShardEventStream(func(s *kinesis.SubscribeToShardEventStream) { s.Reader = r })), nil
}

// heldStream is the event reader of a heldEvents subscription: in's
// events, the held one among them.
type heldStream struct {
	*hold
	in   *kinesis.SubscribeToShardEventStream
	ch   chan types.SubscribeToShardEventStream
	done chan struct{} // closed by Close
}

func (r *heldStream) pipe() {
	defer close(r.ch)
	for ev := range r.in.Events() {
		if e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); ok && len(e.Value.Records) > 0 && r.take() {
			r.ch <- ev // the reader ranges over ch until it is closed
			continue
		}
		select {
		case r.ch <- ev:
		case <-r.done:
			return
		}
	}
}

func (r *heldStream) Events() <-chan types.SubscribeToShardEventStream { return r.ch }

func (r *heldStream) Close() error {
	close(r.done) // once: the SDK's stream closes its reader once
	return r.in.Close()
}

func (r *heldStream) Err() error { return r.in.Err() }

// outputOf returns a SubscribeToShardOutput whose GetStream is st. The SDK
// sets its stream only in its own deserializer, and starts a goroutine
// there that reads the stream's Reader: replacing that afterwards races.
func outputOf(st *kinesis.SubscribeToShardEventStream) *kinesis.SubscribeToShardOutput {
	out := new(kinesis.SubscribeToShardOutput)
	f := reflect.ValueOf(out).Elem().FieldByName("eventStream")
	if !f.IsValid() || f.Type() != reflect.TypeOf(st) {
		panic("kinesis.SubscribeToShardOutput has no eventStream field of type *SubscribeToShardEventStream any more: outputOf needs another way in")
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(st))
	return out
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
		h := newHold()
		e.coordClient = heldRead{API: srv, hold: h}
		testFencedReaderHandsOutNothing(t, e, h)
	})
}

// The same by enhanced fan-out: a reader fenced while it holds a
// SubscribeToShard event hands out nothing of it (feed.deliver's fence
// check, which both readers share).
func TestFencedFanOutReaderHandsOutNothingReadAfterTheFence(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, srv := fanEnv(t, 1)
		e.liveness = l
		h := newHold()
		e.coordClient = heldEvents{API: srv, hold: h}
		testFencedReaderHandsOutNothing(t, e, h)
	})
}

// testFencedReaderHandsOutNothing fences the owner of e's one shard while
// h holds a read with records in it, and checks that none of them is
// handed out until the owner takes the shard back, and then once.
func testFencedReaderHandsOutNothing(t *testing.T, e *env, h *hold) {
	ids := e.shards()
	col := newCollector()
	a, store := fencedOwner(e, "a", col)
	want := e.feed(a, ids, col, 10, 5)
	waitCheckpointed(t, e, col, ids)

	h.armed.Store(true)
	e.publish(want, 10, 5) // the held read's answer holds (some of) these
	select {
	case <-h.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no read held within 5s")
	}
	fence(t, a, store)
	before := len(col.records())
	close(h.release)
	time.Sleep(3 * e.config("", nil).Poll) // the answer would be handed out by now
	if got := col.records()[before:]; len(got) > 0 {
		t.Fatalf("the fenced reader handed out %d records after its fence, first %s", len(got), got[0].Data)
	}

	store.off.Store(false)
	eventually(t, 10*time.Second, "a reads the shard again", func() bool { return slices.Equal(a.Reading(), ids) })
	col.wait(t, 10*time.Second, fmt.Sprintf("the %d records", 20), func(r []*shard.Record) bool { return len(r) >= 20 })
	time.Sleep(3 * e.config("", nil).Poll) // a duplicate would be here by now
	checkKeyOrder(t, col.records(), want)
}
