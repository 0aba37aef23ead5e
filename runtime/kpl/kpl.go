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
// The protobuf reader here knows just this schema, so the package needs no
// protobuf dependency.
package kpl

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Magic starts every aggregated record.
var Magic = []byte{0xF3, 0x89, 0x9A, 0xC2}

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

// IsAggregated reports whether data starts like an aggregated record.
func IsAggregated(data []byte) bool {
	return len(data) >= len(Magic)+md5.Size && bytes.HasPrefix(data, Magic)
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
	var keys, hashKeys []string
	type raw struct {
		key, hashKey uint64
		hasKey, hasHash,
		hasData bool
		data []byte
	}
	var raws []raw
	err = fields(body, func(num int, wire int, v uint64, b []byte) error {
		switch {
		case num == 1 && wire == wireBytes:
			keys = append(keys, string(b))
		case num == 2 && wire == wireBytes:
			hashKeys = append(hashKeys, string(b))
		case num == 3 && wire == wireBytes:
			var r raw
			err := fields(b, func(num int, wire int, v uint64, b []byte) error {
				switch {
				case num == 1 && wire == wireVarint:
					r.key, r.hasKey = v, true
				case num == 2 && wire == wireVarint:
					r.hashKey, r.hasHash = v, true
				case num == 3 && wire == wireBytes:
					r.data, r.hasData = b, true
				case num <= 3:
					return fmt.Errorf("record field %d has wire type %d", num, wire)
				}
				return nil // tags and unknown fields
			})
			if err != nil {
				return err
			}
			raws = append(raws, r)
		case num <= 3:
			return fmt.Errorf("field %d has wire type %d", num, wire)
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
		body = appendBytes(body, 1, []byte(k))
	}
	for _, k := range hashKeys {
		body = appendBytes(body, 2, []byte(k))
	}
	for _, r := range records {
		var rec []byte
		rec = appendVarint(rec, 1, keyIndex[r.PartitionKey])
		if r.ExplicitHashKey != "" {
			rec = appendVarint(rec, 2, hashIndex[r.ExplicitHashKey])
		}
		rec = appendBytes(rec, 3, r.Data)
		body = appendBytes(body, 3, rec)
	}
	out := make([]byte, 0, len(Magic)+len(body)+md5.Size)
	out = append(out, Magic...)
	out = append(out, body...)
	sum := md5.Sum(body)
	return append(out, sum[:]...)
}

func corrupt(msg string) error { return fmt.Errorf("%w: %s", ErrCorrupt, msg) }

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// fields calls fn for each field of a protobuf message: its number, wire
// type and value (v for varints and fixed ints, b for length-delimited).
func fields(msg []byte, fn func(num int, wire int, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return errors.New("bad field tag")
		}
		msg = msg[n:]
		num, wire := tag>>3, int(tag&7)
		if num == 0 || num > math.MaxInt32 {
			return fmt.Errorf("bad field number %d", num)
		}
		var v uint64
		var b []byte
		switch wire {
		case wireVarint:
			if v, n = binary.Uvarint(msg); n <= 0 {
				return fmt.Errorf("field %d: bad varint", num)
			}
			msg = msg[n:]
		case wireFixed64:
			if len(msg) < 8 {
				return fmt.Errorf("field %d: truncated", num)
			}
			v, msg = binary.LittleEndian.Uint64(msg), msg[8:]
		case wireFixed32:
			if len(msg) < 4 {
				return fmt.Errorf("field %d: truncated", num)
			}
			v, msg = uint64(binary.LittleEndian.Uint32(msg)), msg[4:]
		case wireBytes:
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return fmt.Errorf("field %d: bad length", num)
			}
			b, msg = msg[n:n+int(l)], msg[n+int(l):]
		default:
			return fmt.Errorf("field %d: unsupported wire type %d", num, wire)
		}
		if err := fn(int(num), wire, v, b); err != nil {
			return err
		}
	}
	return nil
}

func appendVarint(b []byte, num int, v uint64) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|wireVarint)
	return binary.AppendUvarint(b, v)
}

func appendBytes(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}
