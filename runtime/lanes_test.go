package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// concurrency tracks how many calls run at once.
type concurrency struct {
	now, max atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// submitOne hands the lanes a run of one record.
func (l *lanes) submitOne(ctx context.Context, r *shard.Record) error {
	_, err := l.submit(ctx, []shard.Record{*r})
	return err
}

func TestLanesByKeyKeepOrderPerKeyAndRunInParallel(t *testing.T) {
	const keys, perKey = 32, 50
	var (
		mu   sync.Mutex
		seen = map[string][]int{}
		cc   concurrency
		wg   sync.WaitGroup
	)
	wg.Add(keys * perKey)
	l := newLanes(4, true, func(r *shard.Record) bool {
		defer wg.Done()
		cc.enter()
		defer cc.leave()
		time.Sleep(50 * time.Microsecond) // long enough for lanes to overlap
		var n int
		fmt.Sscan(string(r.Data), &n)
		mu.Lock()
		seen[r.PartitionKey] = append(seen[r.PartitionKey], n)
		mu.Unlock()
		return true
	})
	defer l.close()

	ctx := t.Context()
	for i := range perKey {
		for k := range keys {
			r := &shard.Record{PartitionKey: fmt.Sprintf("customer-%d", k), Data: fmt.Append(nil, i)}
			if err := l.submitOne(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()

	for k, got := range seen {
		for i, n := range got {
			if n != i {
				t.Fatalf("key %s handled out of order: %v", k, got)
			}
		}
	}
	if len(seen) != keys {
		t.Fatalf("saw %d keys, want %d", len(seen), keys)
	}
	if cc.max.Load() < 2 {
		t.Fatalf("at most %d deliveries ran at once, want the 4 lanes to overlap", cc.max.Load())
	}
	if cc.max.Load() > 4 {
		t.Fatalf("%d deliveries ran at once with 4 lanes", cc.max.Load())
	}
}

func TestLanesWithoutKeyRunAllWorkers(t *testing.T) {
	const workers = 4
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(workers)
	var cc concurrency
	l := newLanes(workers, false, func(r *shard.Record) bool {
		cc.enter()
		defer cc.leave()
		started.Done()
		<-release
		return true
	})
	defer l.close()
	// Every record has one key: only plain workers may run them together.
	for range workers {
		if err := l.submitOne(t.Context(), &shard.Record{PartitionKey: "same"}); err != nil {
			t.Fatal(err)
		}
	}
	started.Wait() // all four handlers are running at once
	close(release)
	if got := cc.max.Load(); got != workers {
		t.Fatalf("max concurrency %d, want %d", got, workers)
	}
}

func TestLanesFullLaneBlocksTheSink(t *testing.T) {
	block := make(chan struct{})
	took := make(chan struct{}, 1)
	l := newLanes(1, true, func(r *shard.Record) bool {
		select {
		case took <- struct{}{}:
		default:
		}
		<-block
		return true
	})
	defer func() { close(block); l.close() }()

	ctx := t.Context()
	if err := l.submitOne(ctx, &shard.Record{PartitionKey: "k"}); err != nil {
		t.Fatal(err)
	}
	<-took                         // the worker holds one record; the queue is empty
	for i := range laneDepth / 2 { // the queue's half of the lane's depth
		if err := l.submitOne(ctx, &shard.Record{PartitionKey: "k"}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	// The lane is full: the sink must wait, and give up only when its context ends.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.submitOne(done, &shard.Record{PartitionKey: "k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit on a full lane = %v, want it to wait until its context ends", err)
	}
}

func TestLanesCloseRefusesAndStopsWorkers(t *testing.T) {
	var handled atomic.Int64
	l := newLanes(2, false, func(*shard.Record) bool { handled.Add(1); return true })
	l.close()
	select {
	case <-l.idle:
	case <-time.After(5 * time.Second):
		t.Fatal("workers did not exit after close")
	}
	// The queue may still take a record, but no worker may handle it.
	_ = l.submitOne(t.Context(), &shard.Record{})
	if handled.Load() != 0 {
		t.Fatal("a closed lane handled a record")
	}
}

func TestKeyLaneSpreadsKeys(t *testing.T) {
	const n = 8
	counts := make([]int, n)
	for i := range 8000 {
		counts[keyLane(fmt.Sprintf("customer-%d", i), n)]++
	}
	for lane, c := range counts {
		if c < 700 || c > 1300 {
			t.Fatalf("lane %d got %d of 8000 keys: %v", lane, c, counts)
		}
	}
}

func TestTakeAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Headers
		want int
	}{
		{"absent", Headers{"a": "b"}, 1},
		{"nil headers", nil, 1},
		{"third", Headers{AttemptHeader: "3"}, 3},
		{"garbage", Headers{AttemptHeader: "x"}, 1},
		{"zero", Headers{AttemptHeader: "0"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := takeAttempt(tc.h); got != tc.want {
				t.Fatalf("takeAttempt = %d, want %d", got, tc.want)
			}
			if _, ok := tc.h[AttemptHeader]; ok {
				t.Fatal("the attempt header stayed among the headers")
			}
		})
	}
}

// keysOnLanes returns a key that hashes to lane 0 and one that hashes to
// lane 1 of n.
func keysOnLanes(t *testing.T, n int) (k0, k1 string) {
	for i := 0; k0 == "" || k1 == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		switch keyLane(k, n) {
		case 0:
			k0 = k
		case 1:
			k1 = k
		}
	}
	return k0, k1
}

// A reader stopped while a lane is full leaves exactly a prefix of its run
// queued: a later record bound for a lane with room must not be taken, or
// it would be handled while an earlier one was not, and the checkpoint
// could never pass it (a duplicate after a graceful stop).
func TestLanesSubmitTakesOnlyAPrefix(t *testing.T) {
	k0, k1 := keysOnLanes(t, 2)
	block := make(chan struct{})
	var mu sync.Mutex
	var handled []string
	l := newLanes(2, true, func(r *shard.Record) bool {
		if r.PartitionKey == k0 {
			<-block
		}
		mu.Lock()
		handled = append(handled, string(r.Data))
		mu.Unlock()
		return true
	})
	ctx := t.Context()
	// Lane 0: one record held by its worker, then a full queue.
	fill := []shard.Record{{PartitionKey: k0, Data: []byte("held")}}
	if _, err := l.submit(ctx, fill); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		q := l.queues[0]
		q.mu.Lock()
		n := q.n
		q.mu.Unlock()
		if n == 0 {
			break // the worker took it
		}
		if time.Now().After(deadline) {
			t.Fatal("lane 0's worker never took its record")
		}
		time.Sleep(time.Millisecond)
	}
	fill = fill[:0]
	for range laneDepth / 2 {
		fill = append(fill, shard.Record{PartitionKey: k0, Data: []byte("queued")})
	}
	if n, err := l.submit(ctx, fill); n != len(fill) || err != nil {
		t.Fatalf("filling lane 0: took %d of %d, %v", n, len(fill), err)
	}

	stop, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	run := []shard.Record{
		{PartitionKey: k1, Data: []byte("first")},   // lane 1 has room
		{PartitionKey: k0, Data: []byte("blocked")}, // lane 0 is full
		{PartitionKey: k1, Data: []byte("after")},   // room, but after the blocked one
	}
	n, err := l.submit(stop, run)
	if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit = %d, %v; want 1 taken and the deadline", n, err)
	}
	// Lane 1 handles what it took, however slowly it is scheduled.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		got := slices.Contains(handled, "first")
		mu.Unlock()
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the taken record was not handled")
		}
	}
	close(block)
	l.close()
	<-l.idle
	mu.Lock()
	defer mu.Unlock()
	for _, h := range handled {
		if h == "after" || h == "blocked" {
			t.Fatalf("a record past the first one not taken was handled: %v", handled)
		}
	}
}

// A run longer than one step's bound, over many lanes, arrives whole and in
// order per key.
func TestLanesSubmitLongRun(t *testing.T) {
	const n = 1000
	var mu sync.Mutex
	seen := map[string][]int{}
	var wg sync.WaitGroup
	wg.Add(n)
	l := newLanes(8, true, func(r *shard.Record) bool {
		defer wg.Done()
		var i int
		fmt.Sscan(string(r.Data), &i)
		mu.Lock()
		seen[r.PartitionKey] = append(seen[r.PartitionKey], i)
		mu.Unlock()
		return true
	})
	defer l.close()
	run := make([]shard.Record, n)
	for i := range run {
		run[i] = shard.Record{PartitionKey: fmt.Sprintf("k-%d", i%37), Data: fmt.Append(nil, i)}
	}
	if got, err := l.submit(t.Context(), run); got != n || err != nil {
		t.Fatalf("submit = %d, %v", got, err)
	}
	wg.Wait()
	total := 0
	for k, ids := range seen {
		if !slices.IsSorted(ids) {
			t.Fatalf("key %s out of order: %v", k, ids)
		}
		total += len(ids)
	}
	if total != n {
		t.Fatalf("handled %d of %d", total, n)
	}
}

// BenchmarkLanesHandOff: four readers hand records to eight by-key lanes
// whose work is small, so the hand-off itself weighs.
func BenchmarkLanesHandOff(b *testing.B) {
	var sink int
	defer func() { _ = sink }()
	const readers, lanesN = 4, 8
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%d", i)
	}
	recs := make([]shard.Record, b.N)
	for i := range recs {
		recs[i].PartitionKey = keys[i%len(keys)]
	}
	var left sync.WaitGroup
	left.Add(b.N)
	l := newLanes(lanesN, true, func(r *shard.Record) bool {
		// About the cost of decoding a small JSON record, so that the
		// lanes fill up as they do in a drain.
		for range 60 {
			sink += keyLane(r.PartitionKey, 7)
		}
		left.Done()
		return true
	})
	defer l.close()
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range readers {
		wg.Go(func() {
			run := make([]shard.Record, 0, 256)
			for i := p; i < b.N; i += readers {
				run = append(run, recs[i])
				if len(run) == cap(run) || i+readers >= b.N {
					if _, err := l.submit(context.Background(), run); err != nil {
						b.Error(err)
						return
					}
					run = run[:0]
				}
			}
		})
	}
	wg.Wait()
	left.Wait()
}
