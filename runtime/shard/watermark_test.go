package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func deliver(w *watermark, n int) []*Record {
	run := make([]Record, n)
	out := make([]*Record, n)
	for i := range run {
		run[i] = Record{SequenceNumber: fmt.Sprintf("seq-%03d", i)}
		out[i] = &run[i]
	}
	w.addAll(run)
	return out
}

func TestWatermarkAdvancesOnlyOverContiguousPrefix(t *testing.T) {
	w := newWatermark()
	recs := deliver(w, 5)
	if _, ok, _ := w.progress(); ok {
		t.Fatal("progress before any settle")
	}
	recs[1].Settle()
	recs[2].Settle()
	if _, ok, _ := w.progress(); ok {
		t.Fatal("checkpoint moved past the unsettled first record")
	}
	recs[0].Settle()
	if m, _, _ := w.progress(); m.seq != "seq-002" {
		t.Fatalf("checkpoint = %s, want seq-002 (end of the settled prefix)", m.seq)
	}
	recs[4].Settle()
	recs[4].Settle() // twice is harmless
	if m, _, _ := w.progress(); m.seq != "seq-002" {
		t.Fatalf("checkpoint = %s, want seq-002 while seq-003 is unsettled", m.seq)
	}
	recs[3].Settle()
	if m, _, _ := w.progress(); m.seq != "seq-004" {
		t.Fatalf("checkpoint = %s, want seq-004", m.seq)
	}
	if p := w.pending(); p != 0 {
		t.Fatalf("pending = %d, want 0", p)
	}
}

// Settling in random order across ring growth always lands on the last
// record, and every intermediate checkpoint is a settled prefix.
func TestWatermarkRandomOrderAcrossGrowth(t *testing.T) {
	w := newWatermark()
	const n = 1000
	recs := deliver(w, n)
	settled := make([]bool, n)
	order := rand.Perm(n)
	for _, i := range order {
		recs[i].Settle()
		settled[i] = true
		if m, ok, _ := w.progress(); ok {
			var k int
			fmt.Sscanf(m.seq, "seq-%d", &k)
			for j := 0; j <= k; j++ {
				if !settled[j] {
					t.Fatalf("checkpoint at %d but record %d is unsettled", k, j)
				}
			}
			if k+1 < n && settled[k+1] {
				t.Fatalf("checkpoint at %d stopped short of settled %d", k, k+1)
			}
		}
	}
	if m, _, _ := w.progress(); m.seq != fmt.Sprintf("seq-%03d", n-1) {
		t.Fatalf("final checkpoint %s", m.seq)
	}
}

func TestWatermarkAbandonedIgnoresSettles(t *testing.T) {
	w := newWatermark()
	recs := deliver(w, 3)
	recs[0].Settle()
	w.abandon()
	recs[1].Settle()
	recs[2].Settle()
	if m, _, _ := w.progress(); m.seq != "seq-000" {
		t.Fatalf("abandoned generation moved to %s", m.seq)
	}
	if !recs[2].Stale() {
		t.Fatal("record of an abandoned generation is not stale")
	}
}

func TestWatermarkWaitAndTruncate(t *testing.T) {
	w := newWatermark()
	recs := deliver(w, 2)
	extra := []Record{{SequenceNumber: "not-taken-1"}, {SequenceNumber: "not-taken-2"}}
	w.addAll(extra)
	w.truncate(extra[0].idx) // the sink took neither
	if got := w.pending(); got != 2 {
		t.Fatalf("pending after truncate = %d, want the 2 taken records", got)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- w.wait(ctx)
	}()
	recs[1].Settle()
	select {
	case <-done:
		t.Fatal("wait returned with a record unsettled")
	case <-time.After(20 * time.Millisecond):
	}
	recs[0].Settle()
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if m, _, _ := w.progress(); m.seq != "seq-001" {
		t.Fatalf("checkpoint %s includes a record the sink did not take", m.seq)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.addAll([]Record{{SequenceNumber: "x"}})
	cancel()
	if err := w.wait(ctx); err == nil {
		t.Fatal("wait with an unsettled record and an ended ctx returned nil")
	}
}

func BenchmarkWatermark(b *testing.B) {
	w := newWatermark()
	recs := make([]Record, 1)
	b.ReportAllocs()
	for b.Loop() {
		recs[0] = Record{SequenceNumber: "49600000000000000000000000000000000000000000000000000000"}
		w.addAll(recs)
		recs[0].Settle()
	}
}

// SettleAll settles records of several generations in one call as Settle
// would one by one: each watermark moves over its own settled prefix only,
// a discarded generation does not move, and the drain waiters wake.
func TestSettleAllAcrossWatermarks(t *testing.T) {
	a, b, gone := newWatermark(), newWatermark(), newWatermark()
	ra, rb, rg := deliver(a, 4), deliver(b, 3), deliver(gone, 2)
	gone.abandon()
	// Interleaved as a lane takes them; a's seq-001 is still in flight.
	batch := []*Record{rb[1], ra[0], rg[0], rb[0], ra[2], ra[3], rb[2], rg[1]}
	SettleAll(batch)
	for i, r := range batch {
		if r != nil {
			t.Fatalf("SettleAll left batch[%d] set", i)
		}
	}
	if m, _, _ := a.progress(); m.seq != "seq-000" {
		t.Fatalf("a's checkpoint = %s, want seq-000 while seq-001 is unsettled", m.seq)
	}
	if m, _, _ := b.progress(); m.seq != "seq-002" || b.pending() != 0 {
		t.Fatalf("b's checkpoint = %s with %d pending, want seq-002 and none", m.seq, b.pending())
	}
	if _, ok, _ := gone.progress(); ok {
		t.Fatal("a discarded generation moved its checkpoint")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- a.wait(ctx) }()
	SettleAll([]*Record{ra[1], ra[1]}) // twice in one batch is harmless
	if err := <-waited; err != nil {
		t.Fatalf("wait after the last settle: %v", err)
	}
	if m, _, _ := a.progress(); m.seq != "seq-003" {
		t.Fatalf("a's checkpoint = %s, want seq-003", m.seq)
	}
}

// A closing generation (Stop's second half) waits only for the records a
// handler already runs: those a lane finds stale from then on are skipped,
// whichever order they and the running ones end in, and the checkpoint
// stays before the first skipped one.
func TestWatermarkClosingWaitsOnlyForRunningRecords(t *testing.T) {
	w := newWatermark()
	recs := deliver(w, 6)
	for _, r := range recs[:3] { // 0..2 handed to handlers
		if r.Stale() {
			t.Fatal("stale before closing")
		}
	}
	recs[0].Settle()
	w.close()
	waited := make(chan error, 1)
	go func() { waited <- w.wait(context.Background()) }()
	for _, r := range recs[3:] {
		if !r.Stale() {
			t.Fatalf("%s not stale while closing", r.SequenceNumber)
		}
	}
	recs[2].Settle() // ends after one skipped: still waits for 1
	select {
	case err := <-waited:
		t.Fatalf("wait returned (%v) with record 1 still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	recs[1].Settle()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("wait did not return once the running records settled")
	}
	if m, _, _ := w.progress(); m.seq != "seq-002" {
		t.Errorf("checkpoint at %s, want seq-002 (before the first skipped record)", m.seq)
	}
	if n := w.pending(); n != 3 {
		t.Errorf("%d records pending, want the 3 skipped", n)
	}
}

// A record its lane gave up on (Record.Abandon) is waited for no more,
// the checkpoint never passes it, and no later record begins (stale); the
// records already in handlers still count and are still waited for.
func TestWatermarkAbandonedRecordLeavesTheRunningOnesCounting(t *testing.T) {
	w := newWatermark()
	recs := deliver(w, 5)
	recs[0].Settle()
	// recs[2] is in a handler; recs[3] and recs[4] are queued.
	recs[1].Abandon()
	recs[3].Settle() // settled in a handler too
	if !recs[4].Stale() {
		t.Fatal("a record queued behind an abandoned one may still begin")
	}
	if !w.running() {
		t.Fatal("not running with seq-002 in a handler")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.wait(ctx); err == nil {
		t.Fatal("wait returned while seq-002 was in a handler")
	}
	recs[2].Settle()
	if err := w.wait(context.Background()); err != nil {
		t.Fatalf("wait with no record in a handler: %v", err)
	}
	if w.running() {
		t.Fatal("running with no record in a handler")
	}
	if m, _, _ := w.progress(); m.seq != "seq-000" {
		t.Fatalf("checkpoint = %s, want seq-000 (before the abandoned record)", m.seq)
	}
	if first, ok := w.firstPending(); !ok || first.seq != "seq-001" {
		t.Fatalf("first pending = %v %v, want seq-001", first, ok)
	}
}
