package runtime

import (
	"errors"
	"net"
	"strings"
	"syscall"

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
	return target == e.Kind || target == ErrTransport && isTransport(e.Err)
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

// kindOr is ErrTransport when err is a transport failure, else kind.
func kindOr(kind, err error) error {
	if isTransport(err) {
		return ErrTransport
	}
	return kind
}

func (e *Error) Unwrap() error { return e.Err }
