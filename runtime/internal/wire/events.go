package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/eventstream"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The SDK decodes each SubscribeToShard event with its codec, which reads
// every message into a buffer it never keeps (so each event of up to 1 MiB
// allocates and clears a new one, a third of a draining fan-out reader's
// CPU) and its payload with the schema-driven JSON deserializer (the same
// 9 allocations per record as GetRecords). An event's payload is a
// GetRecords body's twin (Records, MillisBehindLatest, ChildShards, plus
// ContinuationSequenceNumber), so getRecordsDecoder decodes it.

// FastSubscribeToShard is SubscribeToShardOptions with a faster event
// decoder: on a client speaking awsJson1_1, each SubscribeToShardEvent is
// read into a buffer the call keeps and decoded by getRecordsDecoder,
// giving what the SDK gives; any other message (an exception, an unknown
// event) and any payload it is not sure of goes to the SDK as it came.
func FastSubscribeToShard(o *kinesis.Options) {
	SubscribeToShardOptions(o)
	if o.Protocol != nil && o.Protocol.ID() == awsJSON11 {
		o.Protocol = &eventProtocol{ClientProtocol: o.Protocol}
	}
}

// eventProtocol is one SubscribeToShard call's protocol (each call has its
// own: its event stream's reader alone uses it, one message at a time).
type eventProtocol struct {
	smithyhttp.ClientProtocol
	dec *eventstream.Decoder
	buf []byte // the last message's payload buffer, reused
	n   int    // events decoded here, not by the SDK (tests)
}

// maxKeptPayload bounds the payload buffer kept between messages (an
// event holds up to 1 MiB of data, base64 in JSON).
const maxKeptPayload = 4 << 20

func (p *eventProtocol) DeserializeEventMessage(schema *smithy.Schema, reg *smithy.TypeRegistry, r io.Reader) (smithy.Deserializable, error) {
	if p.dec == nil {
		p.dec = eventstream.NewDecoder()
	}
	// The decoder reads the payload into a bytes.Buffer over p.buf, which
	// doubles (allocating and clearing) whenever it has less than 512
	// bytes to spare: read the message's length first and size p.buf so
	// that it never has to.
	var prelude [4]byte
	if _, err := io.ReadFull(r, prelude[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF { // as the SDK's codec
			return nil, io.EOF
		}
		return nil, fmt.Errorf("decode event: %w", err)
	}
	if total := int(binary.BigEndian.Uint32(prelude[:])); total <= maxKeptPayload && cap(p.buf) < total+bytes.MinRead {
		p.buf = make([]byte, 0, total+bytes.MinRead)
	}
	msg, err := p.dec.Decode(io.MultiReader(bytes.NewReader(prelude[:]), r), p.buf[:0])
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF { // as the SDK's codec
			return nil, io.EOF
		}
		return nil, fmt.Errorf("decode event: %w", err)
	}
	if cap(msg.Payload) <= maxKeptPayload {
		p.buf = msg.Payload[:0]
	}
	if isEvent(msg, "SubscribeToShardEvent") {
		d := getRecordsDecoders.Get().(*getRecordsDecoder)
		ev := new(types.SubscribeToShardEvent)
		ok := d.decodeEvent(msg.Payload, ev)
		d.reuse(nil) // the payload is p's buffer: all that ev holds was copied out
		getRecordsDecoders.Put(d)
		if ok {
			p.n++
			return ev, nil
		}
	}
	// The SDK decodes (or rejects) the message from a copy of its frame.
	var frame bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&frame, msg); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	return p.ClientProtocol.DeserializeEventMessage(schema, reg, &frame)
}

// isEvent reports whether msg is an event of type typ with a JSON payload.
func isEvent(msg eventstream.Message, typ string) bool {
	mt, et := msg.Headers.Get(eventstream.MessageTypeHeader), msg.Headers.Get(eventstream.EventTypeHeader)
	if mt == nil || mt.String() != eventstream.EventMessageType || et == nil || et.String() != typ {
		return false
	}
	ct := msg.Headers.Get(eventstream.ContentTypeHeader)
	return ct == nil || ct.String() == "application/json" || ct.String() == "application/x-amz-json-1.1"
}

// decodeEvent decodes a SubscribeToShardEvent payload into ev, reporting
// whether it could (ev is left as it was if not).
func (d *getRecordsDecoder) decodeEvent(b []byte, ev *types.SubscribeToShardEvent) bool {
	r, ok := d.decodeRead(b, "ContinuationSequenceNumber")
	if !ok {
		return false
	}
	ev.Records, ev.ChildShards, ev.MillisBehindLatest, ev.ContinuationSequenceNumber = r.records, r.children, r.behind, r.next
	return true
}
