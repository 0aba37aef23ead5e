package kpl

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
)

// TestBuilderWritesTheKPLFormat checks the builder's output byte for byte
// against an aggregate written out by hand from the KPL's schema; the MD5
// trailer was computed with md5sum(1) over the body bytes.
func TestBuilderWritesTheKPLFormat(t *testing.T) {
	var b Builder
	b.Add("k1", []byte("hi"))
	b.Add("k2", []byte("yo"))
	b.Add("k1", []byte{})
	want := []byte{
		0xF3, 0x89, 0x9A, 0xC2, // magic
		0x0a, 0x02, 'k', '1', // partition_key_table[0] = "k1"
		0x0a, 0x02, 'k', '2', // partition_key_table[1] = "k2"
		0x1a, 0x06, 0x08, 0x00, 0x1a, 0x02, 'h', 'i', // records[0] = {partition_key_index: 0, data: "hi"}
		0x1a, 0x06, 0x08, 0x01, 0x1a, 0x02, 'y', 'o', // records[1] = {partition_key_index: 1, data: "yo"}
		0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00, // records[2] = {partition_key_index: 0, data: ""}
	}
	sum, _ := hex.DecodeString("e12b2e229f53c68194b061235159b53b")
	want = append(want, sum...)
	got := b.Bytes()
	if !bytes.Equal(got, want) {
		t.Fatalf("Bytes() =\n% x\nwant\n% x", got, want)
	}
	if b.Size() != len(want) || b.Len() != 3 {
		t.Fatalf("Size() = %d, Len() = %d; want %d, 3", b.Size(), b.Len(), len(want))
	}
	recs, ok, err := Deaggregate(got)
	if err != nil || !ok || len(recs) != 3 || recs[1].PartitionKey != "k2" || string(recs[1].Data) != "yo" || recs[2].SubSequence != 2 {
		t.Fatalf("Deaggregate: %+v %v %v", recs, ok, err)
	}
}

// TestBuilderSize checks that SizeWith predicts the size exactly, across
// the varint boundaries of lengths and table indexes, so a producer that
// stops at a limit never writes past it.
func TestBuilderSize(t *testing.T) {
	var b Builder
	for i := range 300 {
		key := string(rune('a'+i%200)) + "-key"
		data := bytes.Repeat([]byte{'x'}, i*i%20000)
		want := b.SizeWith(key, data)
		b.Add(key, data)
		if got := len(b.Bytes()); got != want || b.Size() != want {
			t.Fatalf("record %d: SizeWith %d, Size %d, encoded %d", i, want, b.Size(), got)
		}
	}
	var one Builder
	one.Add("key", make([]byte, 200))
	if got, want := one.Size(), Overhead+RecordOverhead(3, 200)+200; got != want {
		t.Fatalf("one record: %d bytes, RecordOverhead says %d", got, want)
	}
	b.Reset()
	b.Add("z", []byte("1"))
	recs, _, err := Deaggregate(b.Bytes())
	if err != nil || len(recs) != 1 || recs[0].PartitionKey != "z" {
		t.Fatalf("after Reset: %+v %v", recs, err)
	}
}

// TestBuilderAddWithin checks that AddWithin adds a record exactly when the
// aggregate stays within the limit, so an aggregator that fills records
// with it never writes one past its bound nor seals one that had room.
func TestBuilderAddWithin(t *testing.T) {
	var b, ref Builder
	for i := range 400 {
		key := string(rune('a'+i%150)) + "-key"
		data := bytes.Repeat([]byte{'y'}, i*7%300)
		limit := 20000 + i%5*10
		fits := b.SizeWith(key, data) <= limit
		if got := b.AddWithin(key, data, limit); got != fits {
			t.Fatalf("record %d: AddWithin = %v at size %d with %d, limit %d", i, got, b.Size(), b.SizeWith(key, data), limit)
		}
		if fits {
			ref.Add(key, data)
		}
		if fits && b.Size() > limit {
			t.Fatalf("record %d: size %d past limit %d", i, b.Size(), limit)
		}
	}
	if !bytes.Equal(b.Bytes(), ref.Bytes()) || b.Len() == 0 || b.Len() == 400 {
		t.Fatalf("AddWithin built %d records, unlike Add's %d (or all or none fit)", b.Len(), ref.Len())
	}
}

// TestBuilderIndexedAdds checks the adds of a caller that keeps the key
// table's indexes itself (an aggregator that knows which keys its
// aggregate holds): they write the same bytes as Add, stop at the limit
// exactly as AddWithin does, and a key added as a second entry is read back
// under its own key.
func TestBuilderIndexedAdds(t *testing.T) {
	var b, ref Builder
	idx := map[string]int{}
	for i := range 400 {
		key := string(rune('a'+i%150)) + "-key"
		data := bytes.Repeat([]byte{'z'}, i*7%300)
		limit := 20000 + i%5*10
		fits := b.SizeWith(key, data) <= limit
		var added bool
		if j, known := idx[key]; known {
			added = b.AddAtWithin(j, data, limit)
		} else {
			var j int
			if j, added = b.AddNewWithin(key, data, limit); added {
				idx[key] = j
				if b.KeyAt(j) != key {
					t.Fatalf("record %d: KeyAt(%d) = %q, want %q", i, j, b.KeyAt(j), key)
				}
			}
		}
		if added != fits {
			t.Fatalf("record %d: added = %v at size %d with %d, limit %d", i, added, b.Size(), b.SizeWith(key, data), limit)
		}
		if fits {
			ref.Add(key, data)
		}
		if b.Size() > limit && fits {
			t.Fatalf("record %d: size %d past limit %d", i, b.Size(), limit)
		}
	}
	if !bytes.Equal(b.Bytes(), ref.Bytes()) || b.Len() == 0 || b.Len() == 400 {
		t.Fatalf("the indexed adds built %d records, unlike Add's %d (or all or none fit)", b.Len(), ref.Len())
	}

	// The same key twice in the table: both entries read as that key.
	var twice Builder
	i0, _ := twice.AddNewWithin("k", []byte("a"), 1<<20)
	twice.AddNewWithin("k", []byte("b"), 1<<20)
	twice.AddAtWithin(i0, []byte("c"), 1<<20)
	out := twice.Bytes()
	if len(out) != twice.Size() {
		t.Fatalf("encoded %d bytes, Size %d", len(out), twice.Size())
	}
	recs, ok, err := Deaggregate(out)
	want := []Record{{PartitionKey: "k", Data: []byte("a")}, {PartitionKey: "k", Data: []byte("b"), SubSequence: 1}, {PartitionKey: "k", Data: []byte("c"), SubSequence: 2}}
	if err != nil || !ok || !equal(recs, want) {
		t.Fatalf("a key in two entries: %+v %v %v, want %+v", recs, ok, err, want)
	}
}

// TestBuilderAppendTo checks that AppendTo writes Bytes after what dst
// holds, into dst's own array when it has room: a producer that reuses one
// buffer for its aggregates allocates nothing per aggregate.
func TestBuilderAppendTo(t *testing.T) {
	var b Builder
	b.Add("k1", []byte("hello"))
	b.Add("k2", []byte("world"))
	want := b.Bytes()
	buf := make([]byte, 3, 3+len(want))
	copy(buf, "pre")
	got := b.AppendTo(buf)
	if !bytes.Equal(got, append([]byte("pre"), want...)) || &got[0] != &buf[0] {
		t.Fatalf("AppendTo = %q (own array: %v), want %q after the prefix, in dst's array", got, &got[0] == &buf[0], want)
	}
	if n := testing.AllocsPerRun(100, func() { got = b.AppendTo(buf[:0]) }); n != 0 {
		t.Errorf("AppendTo into a buffer with room: %v allocations, want 0", n)
	}
	if short := b.AppendTo(make([]byte, 0, 2)); !bytes.Equal(short, want) {
		t.Errorf("AppendTo into a short buffer = %q, want %q", short, want)
	}
}

func FuzzBuilderRoundTrip(f *testing.F) {
	f.Add("a", []byte("x"), "b", []byte{}, uint8(3))
	f.Fuzz(func(t *testing.T, k1 string, d1 []byte, k2 string, d2 []byte, n uint8) {
		var b Builder
		var want []Record
		for i := range int(n%8) + 1 {
			k, d := k1, d1
			if i%2 == 1 {
				k, d = k2, d2
			}
			if b.SizeWith(k, d) < b.Size() {
				t.Fatal("SizeWith shrank")
			}
			b.Add(k, d)
			want = append(want, Record{PartitionKey: k, Data: d, SubSequence: int64(i)})
		}
		out := b.Bytes()
		if len(out) != b.Size() {
			t.Fatalf("encoded %d bytes, Size %d", len(out), b.Size())
		}
		// The same records through the indexed adds, k1's and k2's entries
		// kept by the caller (one entry when the keys are equal), appended
		// to a buffer with a prefix.
		var x Builder
		at := map[string]int{}
		for i, r := range want {
			if j, ok := at[r.PartitionKey]; ok {
				if !x.AddAtWithin(j, r.Data, 1<<30) {
					t.Fatalf("record %d: AddAtWithin refused", i)
				}
				continue
			}
			j, ok := x.AddNewWithin(r.PartitionKey, r.Data, 1<<30)
			if !ok {
				t.Fatalf("record %d: AddNewWithin refused", i)
			}
			at[r.PartitionKey] = j
		}
		if xo := x.AppendTo([]byte("pre")); !bytes.Equal(xo, append([]byte("pre"), out...)) {
			t.Fatalf("indexed adds, AppendTo:\n% x\nwant pre and\n% x", xo, out)
		}
		got, ok, err := Deaggregate(out)
		if err != nil || !ok || !equal(got, want) {
			t.Fatalf("round trip: %+v %v %v, want %+v", got, ok, err, want)
		}
	})
}

// Aggregates written unsealed and sealed together are the bytes Bytes
// writes one by one: as many as a pass sends, more than one kernel's
// lanes, of sizes from one block to the KPL's 50 KiB.
func TestSealWritesEachAggregatesMD5(t *testing.T) {
	var want, got [][]byte
	for i := range 21 {
		var b Builder
		for j := range 1 + i*i*7 {
			b.Add(fmt.Sprintf("key-%d", j%97), bytes.Repeat([]byte{byte(i + j)}, 1+j%200))
		}
		want = append(want, b.Bytes())
		got = append(got, b.AppendUnsealed(nil))
	}
	Seal(got)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("aggregate %d (%d bytes) sealed with others differs from Bytes'", i, len(want[i]))
		}
	}
	if n := testing.AllocsPerRun(20, func() { Seal(got) }); n != 0 {
		t.Errorf("Seal: %v allocations, want 0", n)
	}
}

// VerifyAll finds each good aggregate of a read good, and nothing else:
// not a corrupt one among them, nor a record that is not aggregated.
func TestVerifyAll(t *testing.T) {
	var datas [][]byte
	corrupt := map[int]bool{}
	for i := range 40 {
		switch {
		case i%9 == 4:
			datas = append(datas, []byte(fmt.Sprintf("plain record %d", i)))
			continue
		case i%7 == 3:
			corrupt[i] = true
		}
		var b Builder
		for j := range 1 + i*13 {
			b.Add(fmt.Sprintf("k%d", j), []byte(fmt.Sprintf("record %d of %d", j, i)))
		}
		d := b.Bytes()
		if corrupt[i] {
			d[len(Magic)+i] ^= 0x10
		}
		datas = append(datas, d)
	}
	ok := make([]bool, len(datas))
	VerifyAll(ok, datas)
	for i, d := range datas {
		_, agg, err := Deaggregate(d)
		if want := agg && err == nil; ok[i] != want {
			t.Errorf("record %d: VerifyAll says %v, Deaggregate (aggregated %v, err %v) says %v", i, ok[i], agg, err, want)
		}
		if ok[i] {
			got, _, err := DeaggregateVerified(d)
			want, _, _ := Deaggregate(d)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("record %d: DeaggregateVerified = %v, %v; want Deaggregate's %v", i, got, err, want)
			}
		}
	}
	if len(corrupt) == 0 {
		t.Fatal("no corrupt aggregate among them")
	}
}
