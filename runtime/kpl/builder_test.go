package kpl

import (
	"bytes"
	"encoding/hex"
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
		got, ok, err := Deaggregate(out)
		if err != nil || !ok || !equal(got, want) {
			t.Fatalf("round trip: %+v %v %v, want %+v", got, ok, err, want)
		}
	})
}
