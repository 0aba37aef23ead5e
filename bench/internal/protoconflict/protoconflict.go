// Package protoconflict lets one binary link both peers that deaggregate KPL
// records: github.com/harlow/kinesis-consumer imports
// github.com/awslabs/kinesis-aggregation/go and
// github.com/vmware/vmware-go-kcl-v2 imports its /v2, and both generated
// packages register the protobuf message AggregatedRecord, which panics at
// start-up ("already registered"). Each deaggregator unmarshals into its own
// Go type, so the registry's single entry does not matter to them.
//
// Import it for its side effect, blank, from the main package. Its init sets
// GOLANG_PROTOBUF_REGISTRATION_CONFLICT=ignore (the protobuf runtime reads it
// when a conflict happens; the other switch is a linker flag, which
// `go run` would need on every command line) unless the caller set it.
// It runs before any registration: it imports only os, so it is ready as soon
// as os is initialised, and Go initialises the ready package whose import
// path sorts first, which a github.com path does before
// google.golang.org/protobuf's registry and every package that registers
// through it.
package protoconflict

import "os"

const env = "GOLANG_PROTOBUF_REGISTRATION_CONFLICT"

func init() {
	if os.Getenv(env) == "" {
		os.Setenv(env, "ignore")
	}
}
