package runtime

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// MaxPartitionKeyLength is the service's limit on a partition key, in
// UTF-16 code units, as the service counts a key's length: a character
// outside the Basic Multilingual Plane (most emoji) counts two, so a key of
// 200 emoji is too long.
const MaxPartitionKeyLength = rules.MaxPartitionKey

// MaxRecordSize is the limit on a record's data plus its partition key, in
// bytes, of a stream whose summary names no MaxRecordSizeInKiB (the
// service's default, 1024 KiB); a stream may take up to MaxLargeRecordSize,
// which publishers learn (DescribeStreamSummary) for a record over this.
const MaxRecordSize = 1 << 20

// checkKey reports why key is not a valid partition key: 1 to 256 UTF-16
// units of valid UTF-8, the rule the in-process backend applies too.
func checkKey(key string) error { return rules.PartitionKey(key) }

// uniqueKey returns a process-unique key (rung 4 of the ladder): a
// random prefix, drawn on first use, and a counter (randsrc.Keys, which
// the deterministic simulation seeds per schedule). The service hashes
// keys with MD5, so consecutive counters spread evenly over the shards.
func uniqueKey() string {
	k := randsrc.Keys()
	var buf [32]byte
	b := append(buf[:0], k.Prefix...)
	b = strconv.AppendUint(b, k.Next(), 36)
	return string(b)
}

// handling is the context a handler runs under: it carries the partition
// key of the record being handled, which a publish from inside the handler
// that names no key of its own inherits (the fourth rung of the key ladder),
// so a key's order carries through a pipeline. One allocation per delivery;
// context.WithValue would take two.
type handling struct {
	context.Context
	key string
	log *slog.Logger // the subscription's (stream, handler, owner); nil in tests
	// The record's trace context headers, when tracing is on: the
	// context's span is then its producer's (see producerSpan), parsed when
	// asked for. Copied out of the headers, which the handler may change.
	traceparent, tracestate string
}

type handlingKey struct{}

func (c *handling) Value(k any) any {
	if k == (handlingKey{}) {
		return c
	}
	if c.traceparent != "" && k == spanKey {
		if s, ok := producerSpan(c.traceparent, c.tracestate); ok {
			return s
		}
	}
	return c.Context.Value(k)
}

// withHandledKey returns ctx carrying key as the key of the record being handled.
func withHandledKey(ctx context.Context, key string) context.Context {
	return &handling{Context: ctx, key: key}
}

// handledKey returns the key of the record whose handler ctx belongs to.
func handledKey(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	if h, ok := ctx.Value(handlingKey{}).(*handling); ok {
		return h.key, true
	}
	return "", false
}

// handlingLogger returns the logger of the subscription whose handler ctx
// belongs to, or slog.Default().
func handlingLogger(ctx context.Context) *slog.Logger {
	if h, ok := ctx.Value(handlingKey{}).(*handling); ok && h.log != nil {
		return h.log
	}
	return slog.Default()
}
