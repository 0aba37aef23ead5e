package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Every code with which a service refuses a request's identity or
// permissions is an access failure, whether the SDK has a type for it or
// not; an error the service answers for the stream, the request or its
// own load is not, nor is a failure to reach it.
func TestIsAccess(t *testing.T) {
	answered := func(code string) error {
		return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecords",
			Err: &smithy.GenericAPIError{Code: code, Message: "refused", Fault: smithy.FaultClient}}
	}
	for _, code := range []string{
		"AccessDeniedException", "AccessDenied", "KMSAccessDeniedException",
		"UnrecognizedClientException", "InvalidClientTokenId",
		"InvalidSignatureException", "SignatureDoesNotMatch",
		"IncompleteSignature", "IncompleteSignatureException",
		"MissingAuthenticationToken", "MissingAuthenticationTokenException",
		"ExpiredToken", "ExpiredTokenException", "NotAuthorized",
	} {
		if !isAccess(answered(code)) {
			t.Errorf("%s: isAccess = false, want true", code)
		}
		if err := (&Error{Kind: ErrStream, Err: answered(code)}); !errors.Is(err, ErrAccess) || !errors.Is(err, ErrStream) || errors.Is(err, ErrTransport) {
			t.Errorf("%s: an ErrStream *Error does not match ErrStream and ErrAccess only", code)
		}
	}
	dns := &net.DNSError{Err: "no such host", Name: "kinesis.example.invalid", IsNotFound: true}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"typed AccessDeniedException", &smithy.OperationError{Err: &types.AccessDeniedException{}}, true},
		{"typed KMSAccessDeniedException", &smithy.OperationError{Err: &types.KMSAccessDeniedException{}}, true},
		{"signing failed", &smithy.OperationError{Err: &v4.SigningError{Err: errors.New("failed to retrieve credentials: none")}}, true},
		{"STS throttled the credential fetch", &smithy.OperationError{ServiceID: "Kinesis",
			Err: fmt.Errorf("get identity: %w", fmt.Errorf("get credentials: %w",
				&smithy.OperationError{ServiceID: "STS", Err: &smithy.GenericAPIError{Code: "Throttling"}}))}, true},
		{"record refused for the stream's key", &EntryError{Code: "KMSAccessDeniedException"}, true},
		{"record throttled", &EntryError{Code: "ProvisionedThroughputExceededException"}, false},
		{"stream not found", &smithy.OperationError{Err: &types.ResourceNotFoundException{}}, false},
		{"throttled", answered("ThrottlingException"), false},
		{"invalid argument", answered("InvalidArgumentException"), false},
		{"server fault", answered("InternalFailure"), false},
		{"DNS failure", &smithy.OperationError{Err: &smithyhttp.RequestSendError{Err: dns}}, false},
		{"the user's own error naming identity", fmt.Errorf("get identity: %w", errors.New("mine")), false},
		{"context ended", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := isAccess(tt.err); got != tt.want {
			t.Errorf("%s: isAccess = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A credential provider that fails, behind a real client of each service
// the runtime calls, is an access failure, and only that: no request went
// out, so it is no transport failure either.
func TestFailedCredentialFetchThroughRealClientsIsAccess(t *testing.T) {
	bad := errors.New("no such profile: orders-prod")
	creds := aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, bad
	}))
	endpoint := aws.String("http://127.0.0.1:1")
	_, kerr := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: endpoint, Credentials: creds}).
		DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	_, derr := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: endpoint, Credentials: creds}).
		DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String("leases")})
	for name, cause := range map[string]error{"kinesis": kerr, "dynamodb": derr} {
		err := &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: "orders", Err: cause}
		if !errors.Is(cause, bad) || !errors.Is(err, ErrAccess) || !errors.Is(err, ErrStream) || errors.Is(err, ErrTransport) {
			t.Errorf("%s: %v; want the credential's error, matching ErrStream and ErrAccess, not ErrTransport", name, err)
		}
	}
	// A publish gives up on it at once.
	if kind, retry := classifyCallError(kerr); kind != ErrPublish || retry {
		t.Errorf("classifyCallError = %v, retry %v; want ErrPublish, no retry", kind, retry)
	}

	// A fetch that could not reach its own endpoint (the instance metadata
	// service, STS) says nothing about the credentials: the publish keeps
	// retrying it, as any transport failure, within its context.
	unreachable := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	creds = aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, fmt.Errorf("fetching role credentials: %w", unreachable)
	}))
	_, kerr = kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: endpoint, Credentials: creds}).
		DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	if err := (&Error{Kind: ErrPublish, Err: kerr}); !errors.Is(err, ErrAccess) || !errors.Is(err, ErrTransport) {
		t.Errorf("%v: want it to match ErrAccess and ErrTransport", err)
	}
	if kind, retry := classifyCallError(kerr); kind != ErrPublish || !retry {
		t.Errorf("classifyCallError(%v) = %v, retry %v; want ErrPublish, retried", kerr, kind, retry)
	}
}
