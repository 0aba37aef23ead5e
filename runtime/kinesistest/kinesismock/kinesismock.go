// Package kinesismock lets the AWS SDK read enhanced fan-out from
// kinesis-mock, the Kinesis engine of LocalStack, so that a subscriber
// with runtime.FanOut runs against it in an application's tests as it runs
// against the service:
//
//	cfg.HTTPClient = kinesismock.HTTPClient()
//	client := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
//
// Nothing else needs mending: the runtime's own tests run fan-out on
// kinesis-mock through this transport alone, and read its other
// differences from the service (conformance.KinesisMock, checked against
// the kinesis-mock those tests run) as they are.
package kinesismock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Transport mends the two ways kinesis-mock's SubscribeToShard answers
// differ on the wire from the service's, which the SDK cannot read. Both
// are declared in conformance.KinesisMock, whose suite checks on an
// unmended client that kinesis-mock still has them:
//
//   - NoInitialResponse: the event stream starts with the first
//     SubscribeToShardEvent, without the initial-response event the SDK
//     expects first ("expected initial-response"). The transport inserts
//     one.
//   - RefusesSubscriptionInEventStream: a refused subscription (an unknown
//     consumer, one already subscribed to the shard) is HTTP 200 with an
//     event stream holding one exception message, not an error answer.
//     The transport answers it as the service does: HTTP 400, the
//     exception's type in __type and X-Amzn-ErrorType.
//
// Every other call, and an answer that already is what the service sends,
// passes through unchanged. base nil is a clone of http.DefaultTransport.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	return mendSubscriptions{base: base}
}

type mendSubscriptions struct{ base http.RoundTripper }

func (m mendSubscriptions) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := m.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".SubscribeToShard") {
		return resp, err
	}
	// The first message decides. It is read whole (kinesis-mock sends its
	// first event a second after the call, a refusal at once), as the SDK
	// reads the initial response before the call returns.
	var first bytes.Buffer
	msg, err := eventstream.NewDecoder().Decode(io.TeeReader(resp.Body, &first), nil)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("kinesis-mock SubscribeToShard: first message: %w", err)
	}
	header := func(name string) string {
		if v := msg.Headers.Get(name); v != nil {
			return v.String()
		}
		return ""
	}
	switch {
	case header(":message-type") == "exception":
		resp.Body.Close()
		code := header(":exception-type")
		var body struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(msg.Payload, &body)
		b, _ := json.Marshal(map[string]string{"__type": code, "message": body.Message})
		resp.StatusCode, resp.Status = http.StatusBadRequest, "400 Bad Request"
		resp.Header = resp.Header.Clone()
		resp.Header.Set("Content-Type", "application/x-amz-json-1.1")
		resp.Header.Set("X-Amzn-ErrorType", code)
		resp.Header.Del("Content-Length")
		resp.ContentLength = int64(len(b))
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return resp, nil
	case header(":event-type") == "initial-response":
		resp.Body = readCloser{io.MultiReader(&first, resp.Body), resp.Body}
		return resp, nil
	}
	var initial eventstream.Message
	initial.Headers.Set(":message-type", eventstream.StringValue("event"))
	initial.Headers.Set(":event-type", eventstream.StringValue("initial-response"))
	initial.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	initial.Payload = []byte("{}")
	var frame bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&frame, initial); err != nil {
		resp.Body.Close()
		return nil, err
	}
	resp.Body = readCloser{io.MultiReader(&frame, &first, resp.Body), resp.Body}
	return resp, nil
}

// readCloser reads the mended stream and closes the connection's body.
type readCloser struct {
	io.Reader
	io.Closer
}

// HTTPClient is an HTTP client for kinesis-mock whose SubscribeToShard
// answers are mended (Transport).
func HTTPClient() *http.Client {
	return &http.Client{Transport: Transport(nil)}
}
