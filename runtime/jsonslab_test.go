package runtime

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unsafe"
)

// TestJSONSlabIsEncodingJSON: a batch's or an aggregator's JSON slab
// writes each message as json.Marshal does, through the compiled encoder
// or (for a type it leaves to encoding/json) json.Encoder; small messages
// share a slab, and appending to one cannot overwrite the next; a message larger than the room left, or than a slab, has a slice
// of its own, and the slab goes on filling after it.
func TestJSONSlabIsEncodingJSON(t *testing.T) {
	type fast struct {
		N   int    `json:"n"`
		Pad string `json:"pad"`
	}
	type slow struct { // embedded: encoding/json's to encode
		fast
		M map[string]int `json:"m"`
	}
	var j jsonSlab
	var outs, want [][]byte
	marshal := func(v any) []byte {
		t.Helper()
		out, err := j.marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		outs, want = append(outs, out), append(want, data)
		return out
	}
	// b follows a in the slab: at its end, or one byte on (json.Encoder's
	// newline, which the message leaves out).
	follows := func(a, b []byte) bool {
		end := unsafe.Add(unsafe.Pointer(unsafe.SliceData(a)), len(a))
		next := unsafe.Pointer(unsafe.SliceData(b))
		return next == end || next == unsafe.Add(end, 1)
	}

	a := marshal(&fast{N: 1, Pad: "<a>é"})
	b := marshal(fast{N: 2})
	c := marshal(slow{fast: fast{N: 3}, M: map[string]int{"b": 1, "a": 2}})
	if !follows(a, b) || !follows(b, c) {
		t.Error("small messages, by either encoder, do not share the slab")
	}
	large := marshal(&fast{N: 4, Pad: strings.Repeat("é", slabBytes/2)}) // larger than a slab
	d := marshal(&fast{N: 5})
	if follows(c, large) || follows(large, d) || !follows(c, d) {
		t.Error("a message larger than a slab is in it, or the slab does not go on after it")
	}

	// Room for slabMax, and a message a little over it: it outgrows the
	// slab's array, and is copied out of what the append made.
	j.slab.slab = make([]byte, 0, slabMax+10)
	start := unsafe.SliceData(j.slab.slab)
	over := marshal(&fast{N: 6, Pad: strings.Repeat("y", slabMax)})
	e := marshal(&fast{N: 7})
	if unsafe.SliceData(over) == start || unsafe.SliceData(e) != start {
		t.Error("a message over the room left took the slab, or the slab was not kept for the next")
	}
	for _, out := range outs {
		_ = append(out, "ZZ"...)
	}
	for i := range outs { // read after all were written: none overwrote another
		if !bytes.Equal(outs[i], want[i]) {
			t.Errorf("message %d: %s, want %s", i, outs[i], want[i])
		}
	}
}
