package kinesistest

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
)

// opError wraps a service error the way the SDK does, so callers see the same
// shape (errors.As reaches the types.* value) from both backends.
func opError(op string, err error) error {
	return &smithy.OperationError{ServiceID: "Kinesis", OperationName: op, Err: err}
}

func notFound(format string, args ...any) error {
	return &types.ResourceNotFoundException{Message: msg(format, args...)}
}

func inUse(format string, args ...any) error {
	return &types.ResourceInUseException{Message: msg(format, args...)}
}

func invalidArg(format string, args ...any) error {
	return &types.InvalidArgumentException{Message: msg(format, args...)}
}

// validation is the service's answer to a request that breaks a shape
// constraint (lengths, ranges, required members).
func validation(format string, args ...any) error {
	return &types.ValidationException{Message: msg(format, args...)}
}

func limitExceeded(format string, args ...any) error {
	return &types.LimitExceededException{Message: msg(format, args...)}
}

func expiredIterator(format string, args ...any) error {
	return &types.ExpiredIteratorException{Message: msg(format, args...)}
}

func expiredToken(format string, args ...any) error {
	return &types.ExpiredNextTokenException{Message: msg(format, args...)}
}

func msg(format string, args ...any) *string {
	s := fmt.Sprintf(format, args...)
	return &s
}

// errorCode is the per-entry ErrorCode PutRecords reports for err.
func errorCode(err error) string {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return ae.ErrorCode()
	}
	return "InternalFailure"
}
