package shard

import (
	"errors"
	"math"
	"testing"
	"time"
)

// The rate a person reads is the recent one: over the last ten seconds
// while Status is called every second, the average since the previous call
// when it was not called for longer, and 0 once nothing is handled.
func TestRateMeter(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var m rateMeter
	m.push(t0, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.01 {
			t.Errorf("%s: %.3f per second, want %.3f", what, got, want)
		}
	}
	// 100 a second for 20 s, read every second.
	for s := 1; s <= 20; s++ {
		got := m.perSecond(at(float64(s)), uint64(100*s))
		near("steady, second "+time.Duration(s*int(time.Second)).String(), got, 100)
	}
	// Then 10 a second: after ten more seconds the old rate is out of the window.
	total := uint64(2000)
	for s := 21; s <= 30; s++ {
		total += 10
		m.perSecond(at(float64(s)), total)
	}
	near("after slowing down", m.perSecond(at(30.5), total+5), 10) // 95 since the sample at 21 s
	// No call for a minute: the average since the last sample (30 s).
	near("idle minute", m.perSecond(at(90.5), total+5), 5/60.5)
	// And once nothing more is handled, 0.
	near("idle", m.perSecond(at(92), total+5), 0)
	// Several calls within a second share one sample.
	a := m.perSecond(at(93), total+105)
	b := m.perSecond(at(93.2), total+105)
	if b > a || a <= 0 {
		t.Errorf("calls within a second: %.3f then %.3f", a, b)
	}
}

// Record.Count counts into the record's shard, and a record of no shard
// (a sink's own) is not counted anywhere.
func TestRecordCount(t *testing.T) {
	st := newStats(time.Now())
	r := Record{wm: &watermark{st: st}}
	r.Count(Acked)
	r.Count(Acked)
	r.Count(DeadLettered)
	(&Record{}).Count(Acked)
	by, total := st.handled()
	if by[Acked] != 2 || by[DeadLettered] != 1 || total != 3 {
		t.Fatalf("counted %v (total %d)", by, total)
	}
}

// Failed reads are counted in a row and the last one kept; a read that
// answers clears them, and costs nothing (no allocation) when nothing
// failed, as on every read of a healthy shard.
func TestReadFailures(t *testing.T) {
	st := newStats(time.Now())
	if f := st.readErr.Load(); f != nil {
		t.Fatalf("a new shard shows %+v", f)
	}
	before := time.Now()
	st.readFailed(errors.New("AccessDeniedException: one"))
	st.readFailed(errors.New("AccessDeniedException: two"))
	f := st.readErr.Load()
	if f == nil || f.Count != 2 || f.Err != "AccessDeniedException: two" || f.At.Before(before) {
		t.Fatalf("after two failed reads: %+v; want the second, counted 2", f)
	}
	st.readAnswered()
	if f := st.readErr.Load(); f != nil {
		t.Fatalf("after a read answered: %+v; want none", f)
	}
	if n := testing.AllocsPerRun(100, st.readAnswered); n != 0 {
		t.Errorf("a read that answers allocates %v times", n)
	}
}
