//go:build !race

package telemetry_test

const raceOn = false
