package main

import (
	"os"
	"testing"
)

// TestStarts is reached only if the command's binary got through its
// package initialisation: it links both generated KPL packages (through
// kbench's peers), which panics before main ("proto: message
// AggregatedRecord is already registered") unless protoconflict's init
// has set the conflict policy first.
func TestStarts(t *testing.T) {
	if os.Getenv("GOLANG_PROTOBUF_REGISTRATION_CONFLICT") == "" {
		t.Fatal("the conflict policy was not set")
	}
}

// TestOwned checks the split of messages among callers that every mode's
// order check rests on: each message goes to exactly one caller, the one
// that owns its key, and each caller's messages come in order.
func TestOwned(t *testing.T) {
	for _, tc := range []struct{ n, keys, callers int }{
		{100, 10, 3}, {100, 10, 16}, {25, 10, 4}, {1000, 7, 7}, {0, 10, 2}, {10001, 10000, 2048},
	} {
		o := options{n: tc.n, keys: tc.keys}
		seen := make([]bool, tc.n)
		for c, ids := range byOwner(o, tc.callers) {
			for j, i := range ids {
				if (i%tc.keys)%tc.callers != c {
					t.Errorf("%+v: message %d (key %d) went to caller %d", tc, i, i%tc.keys, c)
				}
				if j > 0 && ids[j-1] >= i {
					t.Errorf("%+v: caller %d has %d after %d", tc, c, i, ids[j-1])
				}
				if seen[i] {
					t.Errorf("%+v: message %d twice", tc, i)
				}
				seen[i] = true
			}
		}
		for i, ok := range seen {
			if !ok {
				t.Errorf("%+v: message %d went to no caller", tc, i)
			}
		}
	}
}
