package dst

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// observationsLocked writes with strconv the text fmt wrote: fingerprints
// taken before and after compare.
func TestObservationsText(t *testing.T) {
	begin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return begin.Add(time.Duration(s * float64(time.Second))) }
	w := &world{begin: begin}
	w.trace = []string{"   0.000s join a0", "  12.345s a0 took shardId-000000000001 from nobody", "1234.5s x"}
	w.traceAt = []time.Duration{0, 12345678901 * time.Nanosecond, 1234500 * time.Millisecond}
	w.pub = []published{
		{id: 1000003, key: "k1", agg: true, at: at(1.5), shard: "shardId-000000000002"},
		{id: 8000001, key: "", at: at(0.000000001), shard: "shardId-000000000000"},
		{id: 7, key: "q\"é\x00", at: time.Time{}},
	}
	w.handled = []handling{
		{app: "a", inst: "a0", id: 1000003, attempt: 1, shard: "shardId-000000000002", seq: "4900", key: "k1", start: at(2), end: at(2.0051234567), outcome: "ack"},
		{app: "b", inst: "b1", id: -1, attempt: 12, key: "8f0c", start: at(-0.25), end: time.Time{}, outcome: "slow", cancelledAt: at(99.999999999), crashedMidst: true},
	}
	w.checkpoints = map[string][]cpWrite{"b1": {{shard: "s1", cp: "SHARD_END", at: at(3)}}, "a0": {{shard: "s0", cp: "12", at: at(1)}, {shard: "s0", cp: "13", at: time.Time{}}}}
	vs := []Violation{{Kind: "lost", Count: 2, What: "app a never handled message 7"}}
	got, want := w.observationsLocked(vs), observationsFmt(w, vs)
	if !slices.Equal(got, want) {
		t.Errorf("observations:\n%s\nwant (fmt):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// observationsFmt is observationsLocked as it was written with fmt.
func observationsFmt(w *world, vs []Violation) []string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.9f", t.Sub(w.begin).Seconds())
	}
	var out []string
	for i, l := range w.trace {
		out = append(out, fmt.Sprintf("%.9f%s", w.traceAt[i].Seconds(), strings.TrimLeft(l, " 0123456789.")[1:]))
	}
	for _, p := range w.pub {
		out = append(out, fmt.Sprintf("%s pub %d key=%q agg=%v shard=%s", at(p.at), p.id, p.key, p.agg, p.shard))
	}
	for _, h := range w.handled {
		out = append(out, fmt.Sprintf("%s handle %s/%s %d#%d %s/%s key=%s end=%s %s cancelled=%s crashed=%v",
			at(h.start), h.app, h.inst, h.id, h.attempt, h.shard, h.seq, h.key, at(h.end), h.outcome, at(h.cancelledAt), h.crashedMidst))
	}
	for _, inst := range slices.Sorted(maps.Keys(w.checkpoints)) {
		for _, c := range w.checkpoints[inst] {
			out = append(out, fmt.Sprintf("%s checkpoint %s %s %s", at(c.at), inst, c.shard, c.cp))
		}
	}
	for _, v := range vs {
		out = append(out, "violation "+v.String())
	}
	return out
}
