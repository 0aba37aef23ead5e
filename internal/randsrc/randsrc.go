// Package randsrc is where the runtime draws its random numbers: backoff
// jitter, the prefix of keyless publishes' partition keys, owner ids and
// lease tokens. Unseeded (always, outside tests) it draws from
// math/rand/v2's global source and crypto/rand, as the runtime did before
// it had this package; the deterministic simulation (fleettest/dst) seeds
// it for each schedule it runs (Seed), so that a schedule's seed fixes
// every draw.
//
// A seeded draw is a function of the seed and of what the caller says
// the draw is (its site, the actor drawing, say a shard id, and the
// draw's index among that actor's draws) only, not of the order in
// which goroutines draw: a simulated run draws the same numbers however
// the Go scheduler orders goroutines runnable at one virtual instant.
package randsrc

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync/atomic"
)

// seeded is the state of a seeded package.
type seeded struct {
	seed uint64
	// n numbers the draws of Uint64 and Read: unique values, whose order
	// among goroutines drawing at one instant is the scheduler's.
	n atomic.Uint64
}

var (
	cur  atomic.Pointer[seeded] // nil: unseeded
	keys atomic.Pointer[KeySeq] // nil: not drawn yet
)

// Seed makes every draw from now on a function of seed, and starts a new
// sequence of unique keys (Keys) whose prefix is one too; restore undoes
// it (the unique keys go on with the sequence they had before). Draws
// made while another goroutine seeds may come from either source: seed
// when nothing draws (a simulation seeds before it starts its brokers and
// restores once they have stopped). Seeds do not nest.
func Seed(seed uint64) (restore func()) {
	prevKeys := keys.Load()
	s := &seeded{seed: seed}
	var p [6]byte
	fill(s, p[:], "keyless prefix", 0)
	keys.Store(&KeySeq{Prefix: hex.EncodeToString(p[:]) + "-"})
	cur.Store(s)
	return func() {
		cur.Store(nil)
		keys.Store(prevKeys)
	}
}

// N returns a number in [0, n) (n > 0): math/rand/v2's N, unless the
// package is seeded, when it is a function of the seed, site (the call
// site), name (the actor drawing: a shard, a record) and i (the draw's
// index among that actor's draws at that site) only.
func N[T ~int64](n T, site, name string, i uint64) T {
	s := cur.Load()
	if s == nil {
		return rand.N(n)
	}
	if n <= 0 {
		panic("randsrc: invalid argument to N")
	}
	return T(s.draw(site, name, i) % uint64(n))
}

// Uint64 returns a random number to tell things apart (a lease token):
// math/rand/v2's Uint64, or when seeded a function of the seed, site and
// how many unique draws the seeded package made before.
func Uint64(site string) uint64 {
	s := cur.Load()
	if s == nil {
		return rand.Uint64()
	}
	return s.draw(site, "", s.n.Add(1))
}

// Read fills b with random bytes (an owner id's suffix): crypto/rand's,
// or when seeded a function of the seed, site and how many unique draws
// the seeded package made before.
func Read(b []byte, site string) {
	s := cur.Load()
	if s == nil {
		_, _ = crand.Read(b)
		return
	}
	fill(s, b, site, s.n.Add(1))
}

func fill(s *seeded, b []byte, site string, i uint64) {
	for j := 0; j < len(b); j += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], s.draw(site, "", i<<8|uint64(j/8)))
		copy(b[j:], w[:])
	}
}

// draw hashes the seed and what names a draw (FNV-1a over the strings,
// a SplitMix64 finalizer between the parts).
func (s *seeded) draw(site, name string, i uint64) uint64 {
	h := mix(s.seed ^ 0x9e3779b97f4a7c15)
	h = mix(fnv(h, site))
	h = mix(fnv(h, name) ^ 0xff)
	return mix(h ^ i)
}

func fnv(h uint64, s string) uint64 {
	h ^= 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// KeySeq is a sequence of process-unique keys (the last rung of the
// runtime's partition-key ladder): Prefix, then Next in base 36.
type KeySeq struct {
	Prefix string
	n      atomic.Uint64
}

// Next returns the next number of the sequence, from 1.
func (k *KeySeq) Next() uint64 { return k.n.Add(1) }

// Keys returns the current sequence of unique keys: one drawn from
// crypto/rand on first use, or the seed's (Seed).
func Keys() *KeySeq {
	if k := keys.Load(); k != nil {
		return k
	}
	return drawKeys()
}

func drawKeys() *KeySeq {
	var r [6]byte
	_, _ = crand.Read(r[:])
	k := &KeySeq{Prefix: hex.EncodeToString(r[:]) + "-"}
	if keys.CompareAndSwap(nil, k) {
		return k
	}
	return keys.Load()
}
