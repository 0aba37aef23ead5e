// Package telemetry tests the runtime's traces and metrics with the
// OpenTelemetry SDK (its in-memory span exporter and manual metric reader).
// The SDK is a test dependency only, so these tests live in the bench
// module, whose go.mod may carry test-only peers, and the framework's own
// go.mod keeps the OpenTelemetry API alone.
package telemetry
