package runtime

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// parseTraceparent reads what propagation.TraceContext reads, and refuses
// what it refuses.
func TestParseTraceparentAgreesWithThePropagator(t *testing.T) {
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", // a later version may add fields
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       // upper case
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // version ff
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",       // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       // zero span id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",     // version 00 with more
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",          // short
		"",
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		got, ok := parseTraceparent(tp)
		if ok != want.IsValid() || (ok && !got.Equal(want)) {
			t.Errorf("%q: got %v (%v), the propagator %v", tp, got, ok, want)
		}
		gotB, okB := parseTraceparent([]byte(tp))
		if okB != ok || !gotB.Equal(got) {
			t.Errorf("%q as bytes: %v (%v), as a string %v (%v)", tp, gotB, okB, got, ok)
		}
	}
}
