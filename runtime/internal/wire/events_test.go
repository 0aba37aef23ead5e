package wire

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/eventstream"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// eventFrames is an event stream of SubscribeToShardEvent messages with
// the given JSON payloads, as the service writes it.
func eventFrames(t testing.TB, payloads ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, p := range payloads {
		var m eventstream.Message
		m.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(eventstream.EventMessageType))
		m.Headers.Set(eventstream.EventTypeHeader, eventstream.StringValue("SubscribeToShardEvent"))
		m.Headers.Set(eventstream.ContentTypeHeader, eventstream.StringValue("application/json"))
		m.Payload = []byte(p)
		if err := enc.Encode(&b, m); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// readEvents reads every event of a stream with protocol p, as the SDK's
// event-stream reader does, until its end or an error.
func readEvents(p interface {
	DeserializeEventMessage(*smithy.Schema, *smithy.TypeRegistry, io.Reader) (smithy.Deserializable, error)
}, stream []byte) ([]smithy.Deserializable, error) {
	r := bytes.NewReader(stream)
	var out []smithy.Deserializable
	for {
		ev, err := p.DeserializeEventMessage(schemas.SubscribeToShardEventStream, kinesis.TypeRegistry, r)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// eventPayload turns a GetRecords body of the cases into an event's: its
// iterator becomes the continuation.
func eventPayload(body string) string {
	return strings.Replace(body, `"NextShardIterator"`, `"ContinuationSequenceNumber"`, 1)
}

// The fast event decoder gives exactly what the SDK gives for every
// GetRecords case turned into an event, each event after others in one
// stream (the payload buffer is reused), and leaves to the SDK what it is
// not sure of, which then fails or decodes as the SDK alone does.
func TestFastSubscribeToShardEventsAreTheSDKs(t *testing.T) {
	eventsEqual := cmp.Options{
		outputsEqual,
		cmpopts.IgnoreUnexported(types.SubscribeToShardEvent{}),
	}
	payloads := []string{`{"ContinuationSequenceNumber":"1","MillisBehindLatest":5,"Records":[],"ChildShards":[{"ShardId":"shardId-000000000001","ParentShards":["shardId-000000000000"],"HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"9"}}]}`}
	fastCase := []bool{true}
	for _, c := range getRecordsCases {
		payloads = append(payloads, eventPayload(c.body))
		fastCase = append(fastCase, c.fast)
	}
	for i, p := range payloads {
		stream := eventFrames(t, payloads[0], p, payloads[0])
		want, wantErr := readEvents(awsjson.New11(schemas.Kinesis_20131202), stream)
		fast := &eventProtocol{ClientProtocol: awsjson.New11(schemas.Kinesis_20131202)}
		got, gotErr := readEvents(fast, stream)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("payload %d: error %v, the SDK's %v", i, gotErr, wantErr)
			continue
		}
		if diff := cmp.Diff(want, got, eventsEqual); diff != "" {
			t.Errorf("payload %d %.80q (-SDK +fast):\n%s", i, p, diff)
		}
		// The first and last events are decoded fast; the middle one too
		// when the case is one the decoder is sure of.
		wantFast := min(len(got), 1) + max(len(got)-2, 0)
		if fastCase[i] {
			wantFast = 3
		}
		if fast.n != wantFast {
			t.Errorf("payload %d %.80q: %d of %d events decoded fast, want %d", i, p, fast.n, len(got), wantFast)
		}
	}
}

// Records of one event stay intact when later events reuse the payload
// buffer.
func TestFastSubscribeToShardRecordsOutliveTheBuffer(t *testing.T) {
	stream := eventFrames(t, eventPayload(manyRecords(50, 100)), eventPayload(manyRecords(80, 300)))
	fast := &eventProtocol{ClientProtocol: awsjson.New11(schemas.Kinesis_20131202)}
	sdk := awsjson.New11(schemas.Kinesis_20131202)
	want, err := readEvents(sdk, stream)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readEvents(fast, stream)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, outputsEqual, cmpopts.IgnoreUnexported(types.SubscribeToShardEvent{})); diff != "" {
		t.Fatalf("events (-SDK +fast):\n%s", diff)
	}
}

func BenchmarkSubscribeToShardEventDecode(b *testing.B) {
	stream := eventFrames(b, eventPayload(manyRecords(4000, 200)))
	for _, bc := range []struct {
		name string
		p    func() interface {
			DeserializeEventMessage(*smithy.Schema, *smithy.TypeRegistry, io.Reader) (smithy.Deserializable, error)
		}
	}{
		{"sdk", func() interface {
			DeserializeEventMessage(*smithy.Schema, *smithy.TypeRegistry, io.Reader) (smithy.Deserializable, error)
		} {
			return awsjson.New11(schemas.Kinesis_20131202)
		}},
		{"fast", func() interface {
			DeserializeEventMessage(*smithy.Schema, *smithy.TypeRegistry, io.Reader) (smithy.Deserializable, error)
		} {
			return &eventProtocol{ClientProtocol: awsjson.New11(schemas.Kinesis_20131202)}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := bc.p()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := readEvents(p, stream); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4000, "ns/record")
		})
	}
}
