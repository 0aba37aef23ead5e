package kinesistest_test

import (
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
)

// The in-process server claims no deviation from the service.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:       func(*testing.T) kinesisapi.API { return kinesistest.New() },
		Throttled: func(*testing.T) kinesisapi.API { return kinesistest.New(kinesistest.WithThrottling()) },
	})
}
