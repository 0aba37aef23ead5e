package runtime

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestIsTransport(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "kinesis.example.invalid", IsNotFound: true}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"DNS failure sent by the SDK", &smithy.OperationError{Err: &smithyhttp.RequestSendError{Err: dns}}, true},
		{"bare DNS error", fmt.Errorf("dial: %w", dns), true},
		{"service answered", &smithy.OperationError{Err: &types.ResourceNotFoundException{}}, false},
		{"context ended", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := isTransport(tt.err); got != tt.want {
			t.Errorf("%s: isTransport = %v, want %v", tt.name, got, tt.want)
		}
	}
}
