package md5x

import (
	"crypto/md5"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// messages returns n messages of the lengths len(i) gives, of random bytes.
func messages(rng *rand.Rand, n int, length func(i int) int) []string {
	out := make([]string, n)
	for i := range out {
		b := make([]byte, length(i))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		out[i] = string(b)
	}
	return out
}

func check(t *testing.T, src []string) {
	t.Helper()
	dst := make([][Size]byte, len(src))
	SumStrings(dst, src)
	bs := make([][]byte, len(src))
	for i, s := range src {
		bs[i] = []byte(s)
	}
	dstB := make([][Size]byte, len(src))
	SumBytes(dstB, bs)
	for i, s := range src {
		want := md5.Sum([]byte(s))
		if dst[i] != want || dstB[i] != want {
			t.Fatalf("message %d of %d (%d bytes): SumStrings %x, SumBytes %x, want crypto/md5's %x", i, len(src), len(s), dst[i], dstB[i], want)
		}
	}
}

// Every length around the block and padding edges, in every lane, beside
// lanes of other lengths (lanes that end sooner and later than it).
func TestSumsAreCryptoMD5s(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n++ {
		for _, count := range []int{1, 2, 3, 15, 16, 17, 33} {
			check(t, messages(rng, count, func(i int) int {
				if i%3 == 0 {
					return n
				}
				return rng.IntN(200)
			}))
		}
	}
	// Aggregates of the KPL's size, as many as a pass sends.
	check(t, messages(rng, 5, func(int) int { return 50<<10 - rng.IntN(1000) }))
	// Partition keys, as the publisher hashes them.
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%d", i)
	}
	check(t, keys)
	check(t, []string{"", strings.Repeat("k", 256), "a"})
}

// The fallback (no AVX-512, or purego) gives the same digests.
func TestSumsWithoutLanes(t *testing.T) {
	if !useLanes {
		t.Log("no AVX-512 here: TestSumsAreCryptoMD5s ran the fallback")
		return
	}
	useLanes = false
	defer func() { useLanes = true }()
	rng := rand.New(rand.NewPCG(3, 4))
	check(t, messages(rng, 40, func(int) int { return rng.IntN(300) }))
}

func FuzzSums(f *testing.F) {
	f.Add([]byte("customer-1"), []byte(""), []byte(strings.Repeat("x", 119)), uint8(3))
	f.Fuzz(func(t *testing.T, a, b, c []byte, n uint8) {
		src := []string{string(a), string(b), string(c)}
		for i := range int(n % 20) {
			src = append(src, src[i%3]+string(rune('a'+i)))
		}
		check(t, src)
	})
}

func BenchmarkKeys(b *testing.B) {
	keys := make([]string, 512)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%d", i*7919%10000)
	}
	dst := make([][Size]byte, len(keys))
	b.Run("crypto-md5", func(b *testing.B) {
		for b.Loop() {
			for i, k := range keys {
				dst[i] = md5.Sum([]byte(k))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
	b.Run("lanes", func(b *testing.B) {
		for b.Loop() {
			SumStrings(dst, keys)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
}

func BenchmarkAggregates(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		src := make([][]byte, n)
		for i := range src {
			src[i] = make([]byte, 50<<10)
		}
		dst := make([][Size]byte, n)
		b.Run(fmt.Sprintf("crypto-md5/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n * 50 << 10))
			for b.Loop() {
				for i, s := range src {
					dst[i] = md5.Sum(s)
				}
			}
		})
		b.Run(fmt.Sprintf("lanes/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n * 50 << 10))
			for b.Loop() {
				SumBytes(dst, src)
			}
		})
	}
}
