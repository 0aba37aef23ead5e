//go:build !race

package runtime_test

// raceEnabled says whether the race detector is on: its sync.Pool drops
// items at random, which allocation counts see.
const raceEnabled = false
