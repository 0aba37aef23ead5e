package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// ErrEventStreamCut is the error a SubscribeToShard event stream ends with
// when its connection dropped or its body ended inside an event, instead
// of a clean end after a whole event.
var ErrEventStreamCut = errors.New("SubscribeToShard event stream cut off")

// SubscribeToShardOptions is the per-call option every SubscribeToShard of
// the runtime passes (it works on any *kinesis.Client, whoever made it). It
// mends two faults of the SDK's event-stream reader (v1.57.0):
//
//   - The reader takes io.ErrUnexpectedEOF for a clean end, and Go's
//     HTTP/2 client reports a dropped connection (and a body cut inside an
//     event) as exactly that, so a cut subscription would look like one
//     that ended normally. With this option such a stream ends with an
//     error that matches ErrEventStreamCut (es.Err()).
//   - The client's protocol keeps decoding state that every event stream
//     of the client shares, a data race between concurrent
//     subscriptions; each call gets its own protocol instead.
func SubscribeToShardOptions(o *kinesis.Options) {
	o.Protocol = awsjson.New11(schemas.Kinesis_20131202)
	o.APIOptions = append(o.APIOptions, addCutCheck)
}

func addCutCheck(stack *middleware.Stack) error {
	return stack.Deserialize.Insert(cutCheck{}, "OperationEventStreamDeserializer", middleware.After)
}

// cutCheck wraps the event stream's body in a frameCheck before the SDK's
// event-stream deserializer reads it.
type cutCheck struct{}

func (cutCheck) ID() string { return "KinesisgenEventStreamCutCheck" }

func (cutCheck) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp.Body != nil {
		resp.Body = &frameCheck{body: resp.Body}
	}
	return out, md, nil
}

// frameCheck follows the event-stream framing of a body (each message
// starts with its total length, a big-endian uint32) and turns an end that
// is not at a message boundary, or a connection that dropped
// (io.ErrUnexpectedEOF), into ErrEventStreamCut.
type frameCheck struct {
	body   io.ReadCloser
	left   uint64 // bytes left of the current message
	prefix [4]byte
	have   int // bytes of prefix read at a message's start
}

func (f *frameCheck) Read(p []byte) (int, error) {
	n, err := f.body.Read(p)
	f.track(p[:n])
	switch {
	case err == io.EOF && (f.left > 0 || f.have > 0):
		return n, ErrEventStreamCut
	case errors.Is(err, io.ErrUnexpectedEOF):
		return n, ErrEventStreamCut
	}
	return n, err
}

func (f *frameCheck) track(b []byte) {
	for len(b) > 0 {
		if f.left == 0 {
			k := copy(f.prefix[f.have:], b)
			f.have += k
			b = b[k:]
			if f.have < len(f.prefix) {
				return
			}
			f.have = 0
			total := uint64(binary.BigEndian.Uint32(f.prefix[:]))
			if total < uint64(len(f.prefix)) {
				total = uint64(len(f.prefix)) // malformed: the decoder says so
			}
			f.left = total - uint64(len(f.prefix))
			continue
		}
		k := min(uint64(len(b)), f.left)
		f.left -= k
		b = b[k:]
	}
}

func (f *frameCheck) Close() error { return f.body.Close() }
