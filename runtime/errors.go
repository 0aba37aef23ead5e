package runtime

import (
	"errors"
	"strings"
)

// Sentinels for the states and kinds of failure; match them with errors.Is.
// Every error the runtime returns is either one of them or an *Error whose
// Kind is one of them.
var (
	ErrNotConnected = errors.New("kinesis: not connected")
	ErrInvalid      = errors.New("kinesis: invalid")
	ErrStream       = errors.New("kinesis: stream")
	ErrPublish      = errors.New("kinesis: publish")
	ErrRead         = errors.New("kinesis: read")
	ErrLease        = errors.New("kinesis: lease")
	ErrDecode       = errors.New("kinesis: decode")
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

func (e *Error) Is(target error) bool { return target == e.Kind }
func (e *Error) Unwrap() error        { return e.Err }
