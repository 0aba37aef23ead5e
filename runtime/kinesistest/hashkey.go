package kinesistest

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"unsafe"
)

// hashKey is a 128-bit hash key as the service sees it: MD5 of the partition
// key read as a big-endian unsigned integer. Two uint64 halves compare and
// route without allocating.
type hashKey struct{ hi, lo uint64 }

var maxHashKey = hashKey{^uint64(0), ^uint64(0)}

func hashOf(partitionKey string) hashKey {
	sum := md5.Sum([]byte(partitionKey))
	return hashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

func (h hashKey) less(o hashKey) bool {
	return h.hi < o.hi || (h.hi == o.hi && h.lo < o.lo)
}

func (h hashKey) big() *big.Int {
	b := new(big.Int).SetUint64(h.hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(h.lo))
}

func (h hashKey) String() string { return h.big().String() }

func (h hashKey) inc() hashKey {
	if h.lo == ^uint64(0) {
		return hashKey{h.hi + 1, 0}
	}
	return hashKey{h.hi, h.lo + 1}
}

func (h hashKey) dec() hashKey {
	if h.lo == 0 {
		return hashKey{h.hi - 1, ^uint64(0)}
	}
	return hashKey{h.hi, h.lo - 1}
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

func fromBig(b *big.Int) hashKey {
	lo := new(big.Int).And(b, new(big.Int).SetUint64(^uint64(0))).Uint64()
	hi := new(big.Int).Rsh(b, 64).Uint64()
	return hashKey{hi, lo}
}

// parseHashKey reads a decimal hash key in [0, 2^128).
func parseHashKey(s string) (hashKey, error) {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok || b.Sign() < 0 || b.Cmp(two128) >= 0 {
		return hashKey{}, fmt.Errorf("%q is not a hash key (a decimal integer in [0, 2^128))", s)
	}
	return fromBig(b), nil
}

// evenRanges splits the hash-key space into n contiguous ranges the way
// CreateStream does: n-1 ranges of floor(2^128/n) keys, the last one takes
// the remainder.
func evenRanges(n int) [][2]hashKey {
	step := new(big.Int).Div(two128, big.NewInt(int64(n)))
	out := make([][2]hashKey, n)
	start := new(big.Int)
	for i := range n {
		end := new(big.Int).Add(start, step)
		end.Sub(end, big.NewInt(1))
		if i == n-1 {
			end = fromBig(maxHashKey.big()).big()
		}
		out[i] = [2]hashKey{fromBig(start), fromBig(end)}
		start = new(big.Int).Add(end, big.NewInt(1))
	}
	return out
}

// Sequence numbers are 56 decimal digits, like the service's: "49", then the
// stream-wide counter (34 digits), then the shard's index (20 digits). The
// fixed width makes string order equal numeric order, the counter makes them
// increase per shard (and roughly with time across shards), and the shard
// index lets AT_SEQUENCE_NUMBER reject a number from another shard.
const (
	seqLen        = 56
	seqCounterLen = 34
	seqShardLen   = 20
)

func formatSeq(counter uint64, shardIndex int) string {
	var b [seqLen]byte
	return string(appendSeq(b[:0], counter, shardIndex))
}

func appendSeq(dst []byte, counter uint64, shardIndex int) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, seqLen)...)
	b := dst[n:]
	b[0], b[1] = '4', '9'
	putDigits(b[2:2+seqCounterLen], counter)
	putDigits(b[2+seqCounterLen:], uint64(shardIndex))
	return dst
}

// seqStrings formats many sequence numbers into one string and returns
// substrings of it: one allocation for a whole answer.
type seqStrings struct{ buf []byte }

func (s *seqStrings) add(counter uint64, shardIndex int) {
	s.buf = appendSeq(s.buf, counter, shardIndex)
}

func (s *seqStrings) len() int { return len(s.buf) / seqLen }

// done returns the i-th added sequence number of each, sharing one string.
func (s *seqStrings) done() func(i int) string {
	if len(s.buf) == 0 {
		return func(int) string { return "" }
	}
	// The buffer is never written again, so the string may share it: a
	// whole answer's sequence numbers without a copy.
	all := unsafe.String(&s.buf[0], len(s.buf))
	s.buf = nil
	return func(i int) string { return all[i*seqLen : (i+1)*seqLen] }
}

func putDigits(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
}

// parseSeq returns the counter and shard index of a sequence number this
// server issued.
func parseSeq(s string) (counter uint64, shardIndex int, err error) {
	if len(s) != seqLen || s[:2] != "49" {
		return 0, 0, fmt.Errorf("%q is not a sequence number of this stream", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, 0, fmt.Errorf("%q is not a sequence number", s)
		}
	}
	c, err1 := strconv.ParseUint(s[2:2+seqCounterLen], 10, 64)
	idx, err2 := strconv.ParseUint(s[2+seqCounterLen:], 10, 31)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not a sequence number of this stream", s)
	}
	return c, int(idx), nil
}

func shardID(index int) string { return fmt.Sprintf("shardId-%012d", index) }

// parseShardID accepts "shardId-000000000003" and, like the service, the
// bare index "3".
func parseShardID(s string) (int, bool) {
	digits := s
	if len(s) > 8 && s[:8] == "shardId-" {
		digits = s[8:]
	}
	n, err := strconv.ParseUint(digits, 10, 31)
	if err != nil {
		return 0, false
	}
	return int(n), true
}
