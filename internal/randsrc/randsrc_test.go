package randsrc

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// draws returns a few draws of each kind, as a seeded run would make them.
func draws() []int64 {
	var out []int64
	for i := range uint64(5) {
		out = append(out, int64(N(10*time.Second, "read", "shardId-000000000001", i)))
		out = append(out, N(int64(1000), "publish retry", "k1", i))
	}
	return out
}

func uniqueKeys(n int) []string {
	k := Keys()
	out := []string{k.Prefix}
	for range n {
		out = append(out, k.Prefix+strconv.FormatUint(k.Next(), 36))
	}
	return out
}

func TestASeedRepeatsItsDraws(t *testing.T) {
	restore := Seed(7)
	d1, k1 := draws(), uniqueKeys(3)
	var b1 [6]byte
	Read(b1[:], "owner")
	u1 := Uint64("lease token")
	restore()

	restore = Seed(7)
	d2, k2 := draws(), uniqueKeys(3)
	var b2 [6]byte
	Read(b2[:], "owner")
	u2 := Uint64("lease token")
	restore()

	if !slices.Equal(d1, d2) {
		t.Errorf("seed 7 drew %v, then %v", d1, d2)
	}
	if !slices.Equal(k1, k2) {
		t.Errorf("seed 7's unique keys were %v, then %v", k1, k2)
	}
	if b1 != b2 || u1 != u2 {
		t.Errorf("seed 7's unique draws were %x, %d, then %x, %d", b1, u1, b2, u2)
	}

	restore = Seed(8)
	d3, k3 := draws(), uniqueKeys(1)
	restore()
	if slices.Equal(d1, d3) || k1[0] == k3[0] {
		t.Errorf("seeds 7 and 8 drew the same: %v %v", d1, k1[0])
	}
}

// TestSeededDrawsIgnoreOrder: a draw is named, not taken from a stream,
// so goroutines drawing in another order draw the same numbers.
func TestSeededDrawsIgnoreOrder(t *testing.T) {
	defer Seed(3)()
	a := N(int64(1<<40), "read", "s1", 1)
	b := N(int64(1<<40), "read", "s2", 1)
	if N(int64(1<<40), "read", "s2", 1) != b || N(int64(1<<40), "read", "s1", 1) != a {
		t.Fatal("a named draw changed when drawn again")
	}
	if a == b || a == N(int64(1<<40), "read", "s1", 2) || a == N(int64(1<<40), "fan-out", "s1", 1) {
		t.Fatal("draws with different names were equal")
	}
	for i := range uint64(1000) {
		if d := N(3*time.Millisecond, "x", "y", i); d < 0 || d >= 3*time.Millisecond {
			t.Fatalf("draw %v outside [0, 3ms)", d)
		}
	}
}

// TestRestoreGoesOnWithTheProcessKeys: the unique keys after a seeded run
// carry on the process's sequence (unique in the process).
func TestRestoreGoesOnWithTheProcessKeys(t *testing.T) {
	before := Keys()
	n := before.Next()
	restore := Seed(1)
	if Keys() == before || Keys().Prefix == before.Prefix {
		t.Fatal("seeding kept the process's keys")
	}
	restore()
	if Keys() != before || Keys().Next() != n+1 {
		t.Fatal("restore did not go on with the process's keys")
	}
	if !strings.HasSuffix(before.Prefix, "-") || len(before.Prefix) != 13 {
		t.Fatalf("prefix %q: want 12 hex digits and a dash", before.Prefix)
	}
}

func TestUnseededDrawsVary(t *testing.T) {
	seen := map[int64]bool{}
	for range 100 {
		seen[N(int64(1<<62), "read", "s", 1)] = true
	}
	if len(seen) < 90 {
		t.Fatalf("100 unseeded draws of one name gave %d values", len(seen))
	}
}
