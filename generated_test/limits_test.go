package generatedtest

import (
	"fmt"
	"go/token"
	"testing"

	"github.com/kinesisgen/kinesisgen/annotations"
	"github.com/kinesisgen/kinesisgen/runtime"
)

// TestMarkerLimitsMatchRuntime: a marker value the generator accepts must be
// one the runtime accepts, so a bad value is a diagnostic at generate time
// rather than an error at Mount.
func TestMarkerLimitsMatchRuntime(t *testing.T) {
	tests := []struct {
		args string
		ok   bool
	}{
		{fmt.Sprintf("workers=%d", runtime.MaxWorkers), true},
		{fmt.Sprintf("workers=%d", runtime.MaxWorkers+1), false},
		{fmt.Sprintf("batch=%d", runtime.MaxBatchSize), true},
		{fmt.Sprintf("batch=%d", runtime.MaxBatchSize+1), false},
		{"poll=" + runtime.MinPollInterval.String(), true},
		{"poll=" + (runtime.MinPollInterval - 1).String(), false},
	}
	for _, tt := range tests {
		_, diags := annotations.ParseComment(token.Position{}, "//kinesis:subscriber stream=s "+tt.args)
		if ok := len(diags) == 0; ok != tt.ok {
			t.Errorf("%s: accepted=%v, want %v (%v)", tt.args, ok, tt.ok, diags)
		}
	}
}
