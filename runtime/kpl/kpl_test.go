package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"slices"
	"testing"
)

// wrap frames a hand-written protobuf body as an aggregated record.
func wrap(body []byte) []byte {
	sum := md5.Sum(body)
	return slices.Concat(Magic, body, sum[:])
}

func TestDeaggregateHandWrittenProtobuf(t *testing.T) {
	body := []byte{
		0x0a, 0x02, 'k', '1', // partition_key_table[0] = "k1"
		0x0a, 0x02, 'k', '2', // partition_key_table[1] = "k2"
		0x12, 0x01, '7', // explicit_hash_key_table[0] = "7"
		// records[0] = {partition_key_index: 1, data: "hi", tags: [{key: "t"}]}
		0x1a, 0x0b, 0x08, 0x01, 0x1a, 0x02, 'h', 'i', 0x22, 0x03, 0x0a, 0x01, 't',
		// records[1] = {partition_key_index: 0, explicit_hash_key_index: 0, data: ""}
		0x1a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x00,
	}
	got, ok, err := Deaggregate(wrap(body))
	if err != nil || !ok {
		t.Fatalf("Deaggregate: ok=%v err=%v", ok, err)
	}
	want := []Record{
		{PartitionKey: "k2", Data: []byte("hi"), SubSequence: 0},
		{PartitionKey: "k1", ExplicitHashKey: "7", Data: []byte{}, SubSequence: 1},
	}
	if !equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestNotAggregated(t *testing.T) {
	for _, data := range [][]byte{
		[]byte(`{"id":1}`),
		nil,
		Magic, // too short to hold a checksum
		append(slices.Clone(Magic), make([]byte, 15)...),
	} {
		recs, ok, err := Deaggregate(data)
		if ok || err != nil || recs != nil {
			t.Errorf("Deaggregate(%q) = %v, %v, %v; want not aggregated", data, recs, ok, err)
		}
	}
}

func TestCorruptAggregates(t *testing.T) {
	good := Aggregate([]Record{{PartitionKey: "a", Data: []byte("x")}})
	flipped := slices.Clone(good)
	flipped[len(Magic)+1] ^= 1
	tests := map[string][]byte{
		"checksum mismatch":         flipped,
		"bad partition key index":   wrap([]byte{0x0a, 0x01, 'a', 0x1a, 0x04, 0x08, 0x05, 0x1a, 0x00}),
		"bad explicit hash index":   wrap([]byte{0x0a, 0x01, 'a', 0x1a, 0x06, 0x08, 0x00, 0x10, 0x03, 0x1a, 0x00}),
		"record without data":       wrap([]byte{0x0a, 0x01, 'a', 0x1a, 0x02, 0x08, 0x00}),
		"record without key index":  wrap([]byte{0x0a, 0x01, 'a', 0x1a, 0x02, 0x1a, 0x00}),
		"length past the end":       wrap([]byte{0x0a, 0x09, 'a'}),
		"truncated varint":          wrap([]byte{0x1a, 0x01, 0x08}),
		"wrong wire type for table": wrap([]byte{0x08, 0x01}),
		"field number zero":         wrap([]byte{0x02, 0x00}),
		"unsupported wire type":     wrap([]byte{0x0b}),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			_, ok, err := Deaggregate(data)
			if !ok || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ok=%v err=%v, want ok and ErrCorrupt", ok, err)
			}
		})
	}
}

func TestAggregateRoundTrip(t *testing.T) {
	in := []Record{
		{PartitionKey: "alice", Data: []byte(`{"n":1}`)},
		{PartitionKey: "bob", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte(`{"n":2}`)},
		{PartitionKey: "alice", Data: bytes.Repeat([]byte{0xff}, 300)},
		{PartitionKey: "ключ", Data: nil},
	}
	out, ok, err := Deaggregate(Aggregate(in))
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	for i := range in {
		in[i].SubSequence = int64(i)
	}
	if !equal(out, in) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

func FuzzDeaggregate(f *testing.F) {
	f.Add(Aggregate([]Record{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", ExplicitHashKey: "1", Data: []byte("y")}}), "k", []byte("d"))
	f.Add([]byte(`{"plain":true}`), "", []byte{})
	f.Fuzz(func(t *testing.T, data []byte, key string, payload []byte) {
		// Arbitrary bytes, framed or not: never a panic, and only ErrCorrupt.
		for _, d := range [][]byte{data, wrap(data)} {
			if _, _, err := Deaggregate(d); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
		}
		in := []Record{{PartitionKey: key, Data: payload}, {PartitionKey: key + "2", ExplicitHashKey: key, Data: data}}
		out, ok, err := Deaggregate(Aggregate(in))
		in[1].SubSequence = 1
		if key == "" {
			in[1].ExplicitHashKey = "" // an empty explicit hash key is not written
		}
		if err != nil || !ok || !equal(out, in) {
			t.Fatalf("round trip: %+v %v %v, want %+v", out, ok, err, in)
		}
	})
}

func equal(a, b []Record) bool {
	return slices.EqualFunc(a, b, func(x, y Record) bool {
		return x.PartitionKey == y.PartitionKey && x.ExplicitHashKey == y.ExplicitHashKey &&
			bytes.Equal(x.Data, y.Data) && x.SubSequence == y.SubSequence
	})
}
