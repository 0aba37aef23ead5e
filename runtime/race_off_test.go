//go:build !race

package runtime_test

// raceEnabled says whether the race detector is on: it makes sync.Pool
// drop items at random, so allocation counts are not the runtime's.
const raceEnabled = false
