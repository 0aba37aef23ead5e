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
