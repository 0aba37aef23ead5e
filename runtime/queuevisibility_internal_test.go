package runtime

import (
	"fmt"
	"testing"
	"time"
)

// The rejected set forgets entries after its ttl and beyond its size,
// oldest first; a record rejected again is remembered anew.
func TestRejectedSetExpiresAndCaps(t *testing.T) {
	s := rejectedSet{ttl: time.Minute, max: 3}
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		s.add(fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second))
	}
	if n := s.len(); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	now := t0.Add(5 * time.Second)
	if s.has("0", now, false) || s.has("1", now, false) || !s.has("4", now, false) {
		t.Error("not the newest three kept")
	}
	if !s.has("2", now, true) || s.has("2", now, false) {
		t.Error("forget did not forget")
	}
	// Rejected again after being forgotten: its older listing's expiry
	// must not drop the new one.
	s.add("2", t0.Add(50*time.Second))
	if !s.has("2", t0.Add(62*time.Second), false) {
		t.Error("a record rejected again was forgotten with its older listing")
	}
	if s.has("3", t0.Add(63*time.Second), false) || s.has("4", t0.Add(64*time.Second), false) {
		t.Error("entries kept past their ttl")
	}
	if !s.has("2", t0.Add(64*time.Second), false) {
		t.Error("the newer listing expired early")
	}
	if s.has("2", t0.Add(110*time.Second), false) || s.len() != 0 || s.n.Load() != 0 {
		t.Errorf("not empty after every ttl: %d listed, %d remembered", s.len(), s.n.Load())
	}
}
