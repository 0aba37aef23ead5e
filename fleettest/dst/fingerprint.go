package dst

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
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
	// strconv, not fmt: the same text (%.9f, %d, %q, %v) at a third of
	// the cost, for every run of a soak.
	var b []byte
	at := func(t time.Time) {
		if t.IsZero() {
			b = append(b, '-')
			return
		}
		b = strconv.AppendFloat(b, t.Sub(w.begin).Seconds(), 'f', 9, 64)
	}
	line := func() string { s := string(b); b = b[:0]; return s }
	out := make([]string, 0, len(w.trace)+len(w.pub)+len(w.handled)+len(vs))
	for i, l := range w.trace {
		b = strconv.AppendFloat(b, w.traceAt[i].Seconds(), 'f', 9, 64)
		b = append(b, strings.TrimLeft(l, " 0123456789.")[1:]...)
		out = append(out, line())
	}
	for _, p := range w.pub {
		at(p.at)
		b = append(b, " pub "...)
		b = strconv.AppendInt(b, p.id, 10)
		b = append(b, " key="...)
		b = strconv.AppendQuote(b, p.key)
		b = append(b, " agg="...)
		b = strconv.AppendBool(b, p.agg)
		b = append(b, " shard="...)
		b = append(b, p.shard...)
		out = append(out, line())
	}
	for _, h := range w.handled {
		at(h.start)
		b = append(b, " handle "...)
		b = append(b, h.app...)
		b = append(b, '/')
		b = append(b, h.inst...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, h.id, 10)
		b = append(b, '#')
		b = strconv.AppendInt(b, int64(h.attempt), 10)
		b = append(b, ' ')
		b = append(b, h.shard...)
		b = append(b, '/')
		b = append(b, h.seq...)
		b = append(b, " key="...)
		b = append(b, h.key...)
		b = append(b, " end="...)
		at(h.end)
		b = append(b, ' ')
		b = append(b, h.outcome...)
		b = append(b, " cancelled="...)
		at(h.cancelledAt)
		b = append(b, " crashed="...)
		b = strconv.AppendBool(b, h.crashedMidst)
		out = append(out, line())
	}
	for _, inst := range slices.Sorted(maps.Keys(w.checkpoints)) {
		for _, c := range w.checkpoints[inst] {
			at(c.at)
			b = append(b, " checkpoint "...)
			b = append(b, inst...)
			b = append(b, ' ')
			b = append(b, c.shard...)
			b = append(b, ' ')
			b = append(b, c.cp...)
			out = append(out, line())
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
