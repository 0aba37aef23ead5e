// Package kpl reads and writes records aggregated by the Kinesis Producer
// Library: many user records packed into one Kinesis record.
//
// The format: the magic bytes 0xF3 0x89 0x9A 0xC2, a protobuf
// AggregatedRecord, and the 16-byte MD5 of the protobuf bytes.
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4; // ignored
//	}
//
// The protobuf wire format is read and written with
// google.golang.org/protobuf/encoding/protowire; the schema is small enough
// to need no generated code.
//
// The MD5s of many aggregates cost a fraction of one after another when
// they run together: Seal writes the trailers of aggregates that
// Builder.AppendUnsealed wrote, and VerifyAll checks those of a read's
// records before DeaggregateVerified expands them.
package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kinesisgen/kinesisgen/runtime/internal/md5x"
)

// Magic starts every aggregated record.
var Magic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// Overhead is the size of an aggregate's framing: the magic bytes and the
// MD5 trailer.
const Overhead = 4 + md5.Size

// ErrCorrupt is matched (errors.Is) by every error of Deaggregate.
var ErrCorrupt = errors.New("kpl: corrupt aggregated record")

// Record is one user record of an aggregate.
type Record struct {
	PartitionKey    string
	ExplicitHashKey string // empty when the record names none
	Data            []byte
	// SubSequence is the record's index in its aggregate; with the Kinesis
	// record's sequence number it identifies the user record.
	SubSequence int64
}

// Field numbers of the schema above.
const (
	fieldPartitionKeyTable    protowire.Number = 1
	fieldExplicitHashKeyTable protowire.Number = 2
	fieldRecords              protowire.Number = 3

	fieldPartitionKeyIndex    protowire.Number = 1
	fieldExplicitHashKeyIndex protowire.Number = 2
	fieldData                 protowire.Number = 3
)

// IsAggregated reports whether data starts like an aggregated record.
func IsAggregated(data []byte) bool {
	return len(data) >= Overhead && bytes.HasPrefix(data, Magic)
}

// Deaggregate returns the user records of an aggregated record, in order.
// ok is false, with no error, when data is not aggregated (it is then one
// user record as it is). An aggregate whose checksum, protobuf or table
// indexes are wrong is an error matching ErrCorrupt. Data of the returned
// records aliases data.
func Deaggregate(data []byte) (records []Record, ok bool, err error) {
	if !IsAggregated(data) {
		return nil, false, nil
	}
	body := data[len(Magic) : len(data)-md5.Size]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], data[len(data)-md5.Size:]) {
		return nil, true, corrupt("MD5 mismatch")
	}
	return deaggregate(body)
}

// VerifyAll sets ok[i] to whether datas[i] is an aggregated record whose
// MD5 trailer matches its body, for a read's records at once: the digests
// run side by side (runtime/internal/md5x), where Deaggregate's, one
// record after another, take most of the CPU of reading aggregates. ok
// must be at least as long as datas.
func VerifyAll(ok []bool, datas [][]byte) {
	var (
		at     [md5x.Lanes]int
		bodies [md5x.Lanes][]byte
		sums   [md5x.Lanes][md5x.Size]byte
	)
	n := 0
	check := func() {
		md5x.SumBytes(sums[:n], bodies[:n])
		for j := range n {
			d := datas[at[j]]
			ok[at[j]] = bytes.Equal(sums[j][:], d[len(d)-md5.Size:])
		}
		clear(bodies[:n])
		n = 0
	}
	for i, d := range datas {
		ok[i] = false
		if IsAggregated(d) {
			at[n], bodies[n] = i, d[len(Magic):len(d)-md5.Size]
			if n++; n == len(bodies) {
				check()
			}
		}
	}
	if n > 0 {
		check()
	}
}

// DeaggregateVerified is Deaggregate for an aggregated record whose MD5
// trailer VerifyAll found to match: it leaves out the check. Anything
// else goes to Deaggregate.
func DeaggregateVerified(data []byte) (records []Record, ok bool, err error) {
	if !IsAggregated(data) {
		return nil, false, nil
	}
	return deaggregate(data[len(Magic) : len(data)-md5.Size])
}

// deaggregate reads an aggregate's body, its trailer checked.
func deaggregate(body []byte) (records []Record, ok bool, err error) {
	var keys, hashKeys []string
	type raw struct {
		key, hashKey uint64
		hasKey, hasHash,
		hasData bool
		data []byte
	}
	var raws []raw
	err = fields(body, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == fieldPartitionKeyTable && typ == protowire.BytesType:
			keys = append(keys, string(b))
		case num == fieldExplicitHashKeyTable && typ == protowire.BytesType:
			hashKeys = append(hashKeys, string(b))
		case num == fieldRecords && typ == protowire.BytesType:
			var r raw
			err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
				switch {
				case num == fieldPartitionKeyIndex && typ == protowire.VarintType:
					r.key, r.hasKey = v, true
				case num == fieldExplicitHashKeyIndex && typ == protowire.VarintType:
					r.hashKey, r.hasHash = v, true
				case num == fieldData && typ == protowire.BytesType:
					r.data, r.hasData = b, true
				case num <= fieldData:
					return fmt.Errorf("record field %d has wire type %d", num, typ)
				}
				return nil // tags and unknown fields
			})
			if err != nil {
				return err
			}
			raws = append(raws, r)
		case num <= fieldRecords:
			return fmt.Errorf("field %d has wire type %d", num, typ)
		}
		return nil
	})
	if err != nil {
		return nil, true, corrupt(err.Error())
	}
	records = make([]Record, len(raws))
	for i, r := range raws {
		if !r.hasKey || !r.hasData {
			return nil, true, corrupt(fmt.Sprintf("record %d lacks its partition key index or data", i))
		}
		if r.key >= uint64(len(keys)) {
			return nil, true, corrupt(fmt.Sprintf("record %d: partition key index %d, table of %d", i, r.key, len(keys)))
		}
		records[i] = Record{PartitionKey: keys[r.key], Data: r.data, SubSequence: int64(i)}
		if r.hasHash {
			if r.hashKey >= uint64(len(hashKeys)) {
				return nil, true, corrupt(fmt.Sprintf("record %d: explicit hash key index %d, table of %d", i, r.hashKey, len(hashKeys)))
			}
			records[i].ExplicitHashKey = hashKeys[r.hashKey]
		}
	}
	return records, true, nil
}

// Aggregate packs records into one aggregated record, as the KPL does
// (SubSequence is ignored: it is the position). Partition and explicit
// hash keys are stored once each in their tables.
func Aggregate(records []Record) []byte {
	var body []byte
	keyIndex := map[string]uint64{}
	hashIndex := map[string]uint64{}
	var keys, hashKeys []string
	for _, r := range records {
		if _, ok := keyIndex[r.PartitionKey]; !ok {
			keyIndex[r.PartitionKey] = uint64(len(keys))
			keys = append(keys, r.PartitionKey)
		}
		if _, ok := hashIndex[r.ExplicitHashKey]; r.ExplicitHashKey != "" && !ok {
			hashIndex[r.ExplicitHashKey] = uint64(len(hashKeys))
			hashKeys = append(hashKeys, r.ExplicitHashKey)
		}
	}
	for _, k := range keys {
		body = protowire.AppendTag(body, fieldPartitionKeyTable, protowire.BytesType)
		body = protowire.AppendString(body, k)
	}
	for _, k := range hashKeys {
		body = protowire.AppendTag(body, fieldExplicitHashKeyTable, protowire.BytesType)
		body = protowire.AppendString(body, k)
	}
	for _, r := range records {
		var rec []byte
		rec = protowire.AppendTag(rec, fieldPartitionKeyIndex, protowire.VarintType)
		rec = protowire.AppendVarint(rec, keyIndex[r.PartitionKey])
		if r.ExplicitHashKey != "" {
			rec = protowire.AppendTag(rec, fieldExplicitHashKeyIndex, protowire.VarintType)
			rec = protowire.AppendVarint(rec, hashIndex[r.ExplicitHashKey])
		}
		rec = protowire.AppendTag(rec, fieldData, protowire.BytesType)
		rec = protowire.AppendBytes(rec, r.Data)
		body = protowire.AppendTag(body, fieldRecords, protowire.BytesType)
		body = protowire.AppendBytes(body, rec)
	}
	return frame(make([]byte, 0, Overhead+len(body)), body)
}

// frame appends the magic bytes, body and body's MD5 to out.
func frame(out, body []byte) []byte {
	out = append(out, Magic...)
	out = append(out, body...)
	sum := md5.Sum(body)
	return append(out, sum[:]...)
}

func corrupt(msg string) error { return fmt.Errorf("%w: %s", ErrCorrupt, msg) }

// fields calls fn for each field of a protobuf message: its number, wire
// type and value (v for varints and fixed ints, b for length-delimited).
func fields(msg []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return fmt.Errorf("bad field tag: %w", protowire.ParseError(n))
		}
		msg = msg[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(msg)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(msg)
		case protowire.Fixed32Type:
			var v32 uint32
			v32, n = protowire.ConsumeFixed32(msg)
			v = uint64(v32)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(msg)
		default:
			return fmt.Errorf("field %d: unsupported wire type %d", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		msg = msg[n:]
		if err := fn(num, typ, v, b); err != nil {
			return err
		}
	}
	return nil
}

// Builder accumulates the user records of one aggregate, keeping its
// encoded size as it goes, so a producer can stop before a limit. The zero
// value is an empty builder.
type Builder struct {
	keys    map[string]uint64 // partition key → table index
	table   []string
	records []built
	body    int // bytes of the protobuf body
}

type built struct {
	key  uint64
	data []byte
}

// Len is the number of user records added.
func (b *Builder) Len() int { return len(b.records) }

// Size is the size of the aggregate Bytes would return.
func (b *Builder) Size() int { return Overhead + b.body }

// SizeWith is the size of the aggregate if a record of key and data were
// added.
func (b *Builder) SizeWith(key string, data []byte) int {
	idx, known := b.keys[key]
	return Overhead + b.body + b.grow(len(key), len(data), idx, known)
}

// RecordOverhead is the most an aggregate grows by for one user record of a
// partition key of keyLen bytes, beyond its data: the record's framing and
// the key's table entry. An aggregate of one record is Overhead plus this
// plus the data.
func RecordOverhead(keyLen, dataLen int) int {
	var b Builder
	return b.grow(keyLen, dataLen, 0, false) - dataLen
}

// grow is how many body bytes a record adds: its key is entry idx of the
// table when known, else a new entry.
func (b *Builder) grow(keyLen, dataLen int, idx uint64, known bool) int {
	n := 0
	if !known {
		idx = uint64(len(b.table))
		n += protowire.SizeTag(fieldPartitionKeyTable) + protowire.SizeBytes(keyLen)
	}
	rec := recordSize(idx, dataLen)
	return n + protowire.SizeTag(fieldRecords) + protowire.SizeBytes(rec)
}

func recordSize(keyIndex uint64, dataLen int) int {
	return protowire.SizeTag(fieldPartitionKeyIndex) + protowire.SizeVarint(keyIndex) +
		protowire.SizeTag(fieldData) + protowire.SizeBytes(dataLen)
}

// Add appends a user record; data is kept, not copied, until Bytes.
func (b *Builder) Add(key string, data []byte) {
	idx, known := b.keys[key]
	b.add(key, data, idx, known, b.grow(len(key), len(data), idx, known))
}

// AddWithin appends a user record, as Add does, if the aggregate is then
// at most limit bytes (Size); it reports whether it did. It looks the key
// up once, where SizeWith and then Add look it up twice.
func (b *Builder) AddWithin(key string, data []byte, limit int) bool {
	idx, known := b.keys[key]
	g := b.grow(len(key), len(data), idx, known)
	if Overhead+b.body+g > limit {
		return false
	}
	b.add(key, data, idx, known, g)
	return true
}

// AddNewWithin appends a user record under a new entry of the key table,
// without looking key up, if the aggregate is then at most limit bytes; it
// returns the entry's index for AddAtWithin, and whether it added the
// record. It is for a caller that knows which keys the aggregate holds (it
// may then add a key again, as a second entry: readers take either). The
// builder's own lookup (Add, AddWithin) does not see the keys it adds.
func (b *Builder) AddNewWithin(key string, data []byte, limit int) (idx int, ok bool) {
	g := b.grow(len(key), len(data), 0, false)
	if Overhead+b.body+g > limit {
		return 0, false
	}
	b.body += g
	idx = len(b.table)
	b.table = append(b.table, key)
	b.records = append(b.records, built{key: uint64(idx), data: data})
	return idx, true
}

// AddAtWithin appends a user record under entry idx of the key table (an
// index AddNewWithin returned since the last Reset), if the aggregate is
// then at most limit bytes; it reports whether it did.
func (b *Builder) AddAtWithin(idx int, data []byte, limit int) bool {
	if idx < 0 || idx >= len(b.table) {
		panic("kpl: AddAtWithin: no key table entry " + strconv.Itoa(idx))
	}
	g := b.grow(len(b.table[idx]), len(data), uint64(idx), true)
	if Overhead+b.body+g > limit {
		return false
	}
	b.body += g
	b.records = append(b.records, built{key: uint64(idx), data: data})
	return true
}

// KeyAt returns entry i of the key table.
func (b *Builder) KeyAt(i int) string { return b.table[i] }

func (b *Builder) add(key string, data []byte, idx uint64, known bool, grow int) {
	b.body += grow
	if !known {
		if b.keys == nil {
			b.keys = make(map[string]uint64)
		}
		idx = uint64(len(b.table))
		b.keys[key] = idx
		b.table = append(b.table, key)
	}
	b.records = append(b.records, built{key: idx, data: data})
}

// Bytes encodes the aggregate: magic bytes, protobuf body, MD5 trailer.
func (b *Builder) Bytes() []byte {
	return b.AppendTo(make([]byte, 0, b.Size()))
}

// AppendTo appends the aggregate Bytes returns to dst (which it grows only
// if its capacity is short of Size more bytes) and returns the result.
func (b *Builder) AppendTo(dst []byte) []byte {
	start := len(dst)
	out := b.AppendUnsealed(dst)
	Seal([][]byte{out[start:]})
	return out
}

// AppendUnsealed appends the aggregate as AppendTo does, its MD5 trailer
// left zero: Seal writes it, for many aggregates at once.
func (b *Builder) AppendUnsealed(dst []byte) []byte {
	out := append(slices.Grow(dst, b.Size()), Magic...)
	for _, k := range b.table {
		out = protowire.AppendTag(out, fieldPartitionKeyTable, protowire.BytesType)
		out = protowire.AppendString(out, k)
	}
	for _, r := range b.records {
		out = protowire.AppendTag(out, fieldRecords, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(recordSize(r.key, len(r.data))))
		out = protowire.AppendTag(out, fieldPartitionKeyIndex, protowire.VarintType)
		out = protowire.AppendVarint(out, r.key)
		out = protowire.AppendTag(out, fieldData, protowire.BytesType)
		out = protowire.AppendBytes(out, r.data)
	}
	return append(out, make([]byte, md5.Size)...)
}

// Seal writes the MD5 trailer of each aggregate that AppendUnsealed wrote,
// in place: the digests run side by side (runtime/internal/md5x), at a
// fraction of the CPU of one after the other.
func Seal(aggs [][]byte) {
	var (
		bodies [md5x.Lanes][]byte
		sums   [md5x.Lanes][md5x.Size]byte
	)
	for len(aggs) > 0 {
		n := min(len(aggs), len(bodies))
		for i, a := range aggs[:n] {
			bodies[i] = a[len(Magic) : len(a)-md5.Size]
		}
		md5x.SumBytes(sums[:n], bodies[:n])
		for i, a := range aggs[:n] {
			copy(a[len(a)-md5.Size:], sums[i][:])
		}
		clear(bodies[:n])
		aggs = aggs[n:]
	}
}

// Reset empties the builder for reuse.
func (b *Builder) Reset() {
	clear(b.keys)
	clear(b.table) // drop the references to the data and keys
	clear(b.records)
	b.table, b.records, b.body = b.table[:0], b.records[:0], 0
}
