package telemetry_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// "on": the SDK as a service would run it, every span sampled and batched
// to an exporter (one that drops them), every instrument aggregated for a
// reader.
func init() {
	variants = append(variants, variant{name: "on", opts: func(tb testing.TB) []runtime.Option {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tb.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
		})
		return []runtime.Option{runtime.WithTracerProvider(tp), runtime.WithMeterProvider(mp)}
	}}, variant{name: "traced", opts: func(tb testing.TB) []runtime.Option {
		// Traces alone, as "on" makes them: what tracing costs without
		// the metrics.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return []runtime.Option{runtime.WithTracerProvider(tp)}
	}})
}
