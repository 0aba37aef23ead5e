package wire

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The SDK serializes a PutRecords body into a buffer that starts at 1 KiB
// and grows by appending, so a 500-record request allocates about five
// times its body (half of all the bytes a publish allocates, and so half of
// the garbage collections, each of which scans every waiting caller's
// stack). The batcher knows the body's size before writing it: wireBody
// writes the same JSON into one buffer of that size.

// awsJSON11 is the protocol whose body wireBody writes.
var awsJSON11 = smithy.ShapeID{Namespace: "aws.protocols", Name: "awsJson1_1"}

// SizedPutRecords is the batcher's PutRecords option: on a client speaking
// awsJson1_1 it writes the body with wireBody; on any other it does nothing.
func SizedPutRecords(o *kinesis.Options) {
	if o.Protocol != nil && o.Protocol.ID() == awsJSON11 {
		o.Protocol = putRecordsProtocol{o.Protocol}
	}
}

// putRecordsProtocol is the client's protocol but for the bodies of the
// PutRecords requests wireBody can write.
type putRecordsProtocol struct{ smithyhttp.ClientProtocol }

func (p putRecordsProtocol) SerializeRequest(ctx context.Context, op *smithy.OperationSchema, in smithy.Serializable, req *smithyhttp.Request) error {
	pr, ok := in.(*kinesis.PutRecordsInput)
	if !ok || pr.DryRun != nil || pr.StreamId != nil {
		return p.ClientProtocol.SerializeRequest(ctx, op, in, req)
	}
	// The protocol sets the method, path and headers; only the body is ours.
	if err := p.ClientProtocol.SerializeRequest(ctx, op, noMembers{}, req); err != nil {
		return err
	}
	sreq, err := req.SetStream(bytes.NewReader(wireBody(pr)))
	if err != nil {
		return fmt.Errorf("set stream: %w", err)
	}
	*req = *sreq
	return nil
}

// noMembers serializes to nothing.
type noMembers struct{}

func (noMembers) Serialize(smithy.ShapeSerializer) {}

// wireBody is the awsJson1_1 body of in, as the SDK writes it (members in
// the same order, absent ones omitted), in a buffer sized up front.
func wireBody(in *kinesis.PutRecordsInput) []byte {
	n := 64 + 6*(len(deref(in.StreamARN))+len(deref(in.StreamName)))
	for i := range in.Records {
		r := &in.Records[i]
		n += 48 + base64.StdEncoding.EncodedLen(len(r.Data)) + 6*(len(deref(r.PartitionKey))+len(deref(r.ExplicitHashKey)))
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	sep := false
	member := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if in.Records != nil {
		member("Records")
		b = append(b, '[')
		for i := range in.Records {
			r := &in.Records[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			sep = false
			if r.Data != nil {
				member("Data")
				b = append(b, '"')
				at := len(b)
				b = b[:at+base64.StdEncoding.EncodedLen(len(r.Data))]
				encodeBase64(b[at:], r.Data)
				b = append(b, '"')
			}
			if r.ExplicitHashKey != nil {
				member("ExplicitHashKey")
				b = appendJSONString(b, *r.ExplicitHashKey)
			}
			if r.PartitionKey != nil {
				member("PartitionKey")
				b = appendJSONString(b, *r.PartitionKey)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
		sep = true
	}
	if in.StreamARN != nil {
		member("StreamARN")
		b = appendJSONString(b, *in.StreamARN)
	}
	if in.StreamName != nil {
		member("StreamName")
		b = appendJSONString(b, *in.StreamName)
	}
	return append(b, '}')
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, the rest (valid UTF-8, as keys are checked
// to be) as it is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
