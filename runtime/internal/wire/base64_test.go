package wire

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

// TestEncodeBase64IsStdEncoding: every length from empty to past several
// 6-byte steps (each tail length, each padding), every byte value in every
// position of a step, and random data.
func TestEncodeBase64IsStdEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(src []byte) {
		t.Helper()
		want := base64.StdEncoding.EncodeToString(src)
		got := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
		encodeBase64(got, src)
		if string(got) != want {
			t.Fatalf("% x: %s, want %s", src, got, want)
		}
	}
	for n := range 100 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		check(src)
	}
	for v := range 256 {
		for at := range 14 {
			src := bytes.Repeat([]byte{0x55}, 14)
			src[at] = byte(v)
			check(src)
		}
	}
	for range 200 {
		src := make([]byte, rng.IntN(70_000))
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		check(src)
	}
}

func FuzzEncodeBase64(f *testing.F) {
	f.Add([]byte("order.created"))
	f.Add([]byte{0xff, 0xfe, 0xfd, 0, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, src []byte) {
		got := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
		encodeBase64(got, src)
		if want := base64.StdEncoding.EncodeToString(src); string(got) != want {
			t.Fatalf("% x: %s, want %s", src, got, want)
		}
	})
}

// BenchmarkBase64 encodes a 50 KB aggregate's worth of data both ways.
func BenchmarkBase64(b *testing.B) {
	src := make([]byte, 50_000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	b.Run("wire", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			encodeBase64(dst, src)
		}
	})
	b.Run("encoding-base64", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			base64.StdEncoding.Encode(dst, src)
		}
	})
}
