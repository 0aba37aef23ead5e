package dst

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// observationsLocked lists what the run did, each line led by its
// virtual time: the trace, every acknowledged publish (its shard, so a
// keyless publish's key shows), every handling (instance, record, key,
// times, outcome), every checkpoint written, and the violations. Two
// runs of a seed that list the same lines in any order did the same
// things at the same virtual times.
func (w *world) observationsLocked(vs []Violation) []string {
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

// Fingerprint hashes observations (Result.Observations): sorted, it is
// blind to the order of lines of one virtual instant (the order of
// goroutines the Go scheduler ran then); unsorted, it is not.
func Fingerprint(observations []string, sorted bool) string {
	if sorted {
		observations = slices.Sorted(slices.Values(observations))
	}
	h := sha256.New()
	for _, l := range observations {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
