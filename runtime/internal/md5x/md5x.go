// Package md5x computes many MD5 digests at once: sixteen lanes of one
// AVX-512 core's registers run the same step over sixteen messages, where
// crypto/md5 runs one message's steps in a chain that leaves the core's
// other units idle. A partition key's digest routes each published
// message and checks each sub-record read; an aggregate's digest is its
// KPL trailer: both come in batches (a StartAll batch, a pass of the
// aggregator, a read of aggregated records).
//
// Without AVX-512 (or built with the purego tag) each digest is
// crypto/md5's, one after the other. The digests are the same either way.
package md5x

//go:generate go run gen.go

import (
	"crypto/md5"
	"encoding/binary"
	"unsafe"
)

// Size is the size of a digest in bytes.
const Size = md5.Size

// Lanes is how many messages one call of the kernel hashes a block of:
// callers that gather messages to hash together gather this many.
const Lanes = 16

// SumStrings sets dst[i] to the MD5 digest of src[i]; dst must be at
// least as long as src.
func SumStrings(dst [][Size]byte, src []string) {
	dst = dst[:len(src)]
	for len(src) > 0 {
		n := min(len(src), Lanes)
		if useLanes && n > 1 {
			sum16(dst[:n], src[:n])
		} else { // one lane costs more than the chain it replaces
			for i, s := range src[:n] {
				dst[i] = md5.Sum(unsafe.Slice(unsafe.StringData(s), len(s)))
			}
		}
		dst, src = dst[n:], src[n:]
	}
}

// SumBytes sets dst[i] to the MD5 digest of src[i]; dst must be at least
// as long as src.
func SumBytes(dst [][Size]byte, src [][]byte) {
	var s [Lanes]string
	for len(src) > 0 {
		n := min(len(src), Lanes)
		for i, b := range src[:n] {
			s[i] = unsafe.String(unsafe.SliceData(b), len(b))
		}
		SumStrings(dst[:n], s[:n])
		clear(s[:n])
		dst, src = dst[n:], src[n:]
	}
}

var iv = [4]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}

// sum16 hashes up to 16 messages side by side. Each lane runs as many
// blocks as its message and padding take: a block of the message is read
// where it is, the last one or two are written out with their padding;
// lanes whose message has ended run on zeros, their digest taken before.
func sum16(dst [][Size]byte, src []string) {
	var (
		s      [4][Lanes]uint32 // the state, one row per word a, b, c, d
		p      [Lanes]*[64]byte // each lane's block this round
		tail   [Lanes][64]byte
		blocks [Lanes]int
		rounds int
	)
	for w := range s {
		for l := range Lanes {
			s[w][l] = iv[w]
		}
	}
	for l := range p {
		p[l] = &zeros
	}
	for l, m := range src {
		// The message, a 0x80 byte, zeros and the bit length in 8 bytes.
		blocks[l] = (len(m)+8)/64 + 1
		rounds = max(rounds, blocks[l])
	}
	for r := range rounds {
		off := r * 64
		for l, m := range src {
			switch {
			case off+64 <= len(m):
				p[l] = (*[64]byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(m)), off))
			case r < blocks[l]:
				t := &tail[l]
				*t = [64]byte{}
				if off <= len(m) {
					copy(t[:], m[off:])
					t[len(m)-off] = 0x80 // within t: a message ending here has another block for its length
				}
				if r == blocks[l]-1 {
					binary.LittleEndian.PutUint64(t[56:], uint64(len(m))<<3)
				}
				p[l] = t
			default:
				p[l] = &zeros
			}
		}
		block16(&s, &p)
		for l := range src {
			if r == blocks[l]-1 {
				for w := range 4 {
					binary.LittleEndian.PutUint32(dst[l][4*w:], s[w][l])
				}
			}
		}
	}
}

// zeros is the block of a lane with nothing to hash.
var zeros [64]byte
