//go:build race

package telemetry_test

// raceOn: the race detector is on; its sync.Pool drops items at random,
// so pooled buffers are allocated again.
const raceOn = true
