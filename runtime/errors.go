package runtime

import (
	"errors"
	"net"
	"strings"
	"syscall"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Sentinels for the states and kinds of failure; match them with errors.Is.
// Every error the runtime returns is either one of them or an *Error whose
// Kind is one of them.
var (
	// ErrNotConnected: the broker is not connected. Connect (or Run) comes
	// before publishing, subscribing with a live stream or seeking; after
	// Shutdown a broker stays closed.
	ErrNotConnected = errors.New("kinesis: not connected (call Connect or Run first; a shut-down broker stays closed)")
	ErrInvalid      = errors.New("kinesis: invalid")
	ErrStream       = errors.New("kinesis: stream")
	ErrPublish      = errors.New("kinesis: publish")
	ErrRead         = errors.New("kinesis: read")
	ErrLease        = errors.New("kinesis: lease")
	ErrDecode       = errors.New("kinesis: decode")
	// ErrTransport: the endpoint could not be reached or did not answer (a
	// refused connection, a failed DNS lookup, a reset): the service said
	// nothing about the stream. errors.Is(err, ErrTransport) also matches
	// an *Error of another kind whose cause is such a failure, for example
	// a publish that gave up retrying a refused connection (ErrPublish too).
	ErrTransport = errors.New("kinesis: transport")
	// ErrAccess: the request's identity or permissions failed: the SDK
	// could not get credentials to sign it with (a missing profile, an
	// expired SSO session), or the service refused them (AccessDenied,
	// UnrecognizedClient, InvalidSignature, ExpiredToken, KMSAccessDenied,
	// ...). errors.Is(err, ErrAccess) matches an *Error of any kind whose
	// cause is such a failure, for example a subscription's start
	// (ErrStream too), a publish (ErrPublish) or a lease table call
	// (ErrLease). A publish fails on it at once: retrying does not mend it.
	ErrAccess = errors.New("kinesis: access")
	// ErrMayBeStored: a publish failed after an attempt whose outcome is
	// unknown, so the service may have stored the record (publishing it
	// again may store it twice, which at-least-once allows): its connection
	// broke or its deadline passed after the request went out, the caller
	// gave up or Shutdown came while it was in flight, or an aggregate
	// landed on a shard it was not sent to. errors.Is(err, ErrMayBeStored)
	// matches such an *Error of kind ErrPublish or ErrNotConnected; its
	// text says so too. A failure the service answered (a refusal) does not
	// match.
	ErrMayBeStored = errors.New("kinesis: may be stored")
)

// Error is a failure with the operation, stream and shard it concerns.
// errors.Is(err, ErrPublish) matches an *Error whose Kind is ErrPublish, and
// errors.As reaches the cause (for example an SDK error) through Unwrap.
type Error struct {
	Kind   error  // one of the Err* sentinels
	Op     string // what failed: "publish", "subscribe", "GetRecords", ...
	Stream string
	Shard  string
	Err    error // the cause, or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Op != "" {
		b.WriteString(": ")
		b.WriteString(e.Op)
	}
	if e.Stream != "" {
		b.WriteString(" stream=")
		b.WriteString(e.Stream)
	}
	if e.Shard != "" {
		b.WriteString(" shard=")
		b.WriteString(e.Shard)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Is(target error) bool {
	return target == e.Kind || target == ErrTransport && isTransport(e.Err) ||
		target == ErrAccess && isAccess(e.Err) || target == ErrMayBeStored && isMaybeStored(e.Err)
}

// maybeStored marks a publish failure's cause after which the record may
// be stored (ErrMayBeStored).
type maybeStored struct{ error }

func (m maybeStored) Unwrap() error { return m.error }

func isMaybeStored(err error) bool {
	_, ok := errors.AsType[maybeStored](err)
	return ok
}

// isTransport says whether err is a failure to reach the service, as
// opposed to an answer from it.
func isTransport(err error) bool {
	if err == nil {
		return false
	}
	if _, answered := errors.AsType[smithy.APIError](err); answered {
		return false
	}
	if _, ok := errors.AsType[*smithyhttp.RequestSendError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// accessCodes are the error codes with which Kinesis, DynamoDB and STS
// refuse a request's identity, signature or permissions.
var accessCodes = map[string]bool{
	"AccessDenied":                        true,
	"AccessDeniedException":               true,
	"KMSAccessDeniedException":            true, // the stream's KMS key refuses the caller
	"UnrecognizedClientException":         true,
	"InvalidClientTokenId":                true,
	"InvalidSignatureException":           true,
	"SignatureDoesNotMatch":               true,
	"IncompleteSignature":                 true,
	"IncompleteSignatureException":        true,
	"MissingAuthenticationToken":          true,
	"MissingAuthenticationTokenException": true,
	"ExpiredToken":                        true,
	"ExpiredTokenException":               true,
	"NotAuthorized":                       true,
}

// isAccess says whether err is an access failure: no credentials to sign
// the request with, or the service refused its identity or permissions.
func isAccess(err error) bool {
	if err == nil {
		return false
	}
	// First the credential fetch: its own cause may be an answer from
	// another service (STS throttling an AssumeRole) that is no access code.
	if credentialsFailed(err) {
		return true
	}
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return accessCodes[ae.ErrorCode()]
	}
	if ee, ok := errors.AsType[*EntryError](err); ok {
		return accessCodes[ee.Code]
	}
	return false
}

// credentialsFailed says whether an SDK call failed getting the credentials
// to sign with. The older signing middleware says so with a type (for any
// failure to sign, a failed credential fetch its usual one); the
// auth-scheme path every current client takes wraps the provider's error
// with fmt.Errorf("get identity: %w") beneath the *smithy.OperationError,
// with no type to match, so that prefix is matched there and only there.
func credentialsFailed(err error) bool {
	if _, ok := errors.AsType[*v4.SigningError](err); ok {
		return true
	}
	oe, ok := errors.AsType[*smithy.OperationError](err)
	return ok && anyCause(oe.Err, func(e error) bool { return strings.HasPrefix(e.Error(), "get identity: ") })
}

// anyCause says whether f holds for err or any error it wraps.
func anyCause(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if anyCause(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// kindOr is ErrTransport when err is a transport failure, else kind.
func kindOr(kind, err error) error {
	if isTransport(err) {
		return ErrTransport
	}
	return kind
}

func (e *Error) Unwrap() error { return e.Err }
