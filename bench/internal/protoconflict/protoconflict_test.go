// An external test package: were it package protoconflict, the imports
// below would be its dependencies and initialised before its init, which
// is the order that panics.
package protoconflict_test

import (
	"os"
	"testing"

	deaggv1 "github.com/awslabs/kinesis-aggregation/go/deaggregator"
	deaggv2 "github.com/awslabs/kinesis-aggregation/go/v2/deaggregator"

	_ "github.com/kinesisgen/kinesisgen/bench/internal/protoconflict"
)

// TestBothDeaggregatorsLink is reached only if the binary, which links both
// generated packages, got through its package initialisation, that is if
// protoconflict's init ran before the second registration. (A binary that
// links both without protoconflict panics before main: "proto: message
// AggregatedRecord is already registered".)
func TestBothDeaggregatorsLink(t *testing.T) {
	if got := os.Getenv("GOLANG_PROTOBUF_REGISTRATION_CONFLICT"); got == "" {
		t.Fatal("the conflict policy was not set")
	}
	if _, err := deaggv1.DeaggregateRecords(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := deaggv2.DeaggregateRecords(nil); err != nil {
		t.Fatal(err)
	}
}
