//go:build race

package fleettest

// raceEnabled builds the workers with the race detector when the test runs
// with it, so the runtime's concurrency is checked across the processes too.
const raceEnabled = true
