package kinesismock

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

func message(headers map[string]string, payload string) []byte {
	var m eventstream.Message
	for k, v := range headers {
		m.Headers.Set(k, eventstream.StringValue(v))
	}
	m.Payload = []byte(payload)
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, m); err != nil {
		panic(err)
	}
	return b.Bytes()
}

var (
	event        = message(map[string]string{":message-type": "event", ":event-type": "SubscribeToShardEvent"}, `{"Records":[]}`)
	initialEvent = message(map[string]string{":message-type": "event", ":event-type": "initial-response"}, `{}`)
	refusal      = message(map[string]string{":message-type": "exception", ":exception-type": "ResourceInUseException"}, `{"message":"in use"}`)
)

// What the transport makes of each first message kinesis-mock may send.
func TestTransport(t *testing.T) {
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	client := &http.Client{Transport: Transport(nil)}
	// call answers answer to op; it returns the response, its body when it
	// is not 200 and otherwise its messages.
	call := func(op string, answer []byte) (*http.Response, []byte, []eventstream.Message) {
		t.Helper()
		body = answer
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", "Kinesis_20131202."+op)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp, b, nil
		}
		var msgs []eventstream.Message
		dec := eventstream.NewDecoder()
		for {
			m, err := dec.Decode(resp.Body, nil)
			if err == io.EOF {
				return resp, nil, msgs
			}
			if err != nil {
				t.Fatalf("%s: message %d: %v", op, len(msgs), err)
			}
			msgs = append(msgs, m)
		}
	}
	eventTypes := func(msgs []eventstream.Message) string {
		var s []string
		for _, m := range msgs {
			s = append(s, m.Headers.Get(":event-type").String())
		}
		return strings.Join(s, " ")
	}

	if _, _, msgs := call("SubscribeToShard", append(append([]byte{}, event...), event...)); eventTypes(msgs) != "initial-response SubscribeToShardEvent SubscribeToShardEvent" {
		t.Errorf("a stream without initial-response became %q", eventTypes(msgs))
	}
	if _, _, msgs := call("SubscribeToShard", append(append([]byte{}, initialEvent...), event...)); eventTypes(msgs) != "initial-response SubscribeToShardEvent" {
		t.Errorf("a stream with its initial-response became %q", eventTypes(msgs))
	}
	resp, b, _ := call("SubscribeToShard", refusal)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-ErrorType") != "ResourceInUseException" ||
		string(b) != `{"__type":"ResourceInUseException","message":"in use"}` {
		t.Errorf("a refusal in the stream became HTTP %d, X-Amzn-ErrorType %q, body %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), b)
	}
	if _, _, msgs := call("GetRecords", event); eventTypes(msgs) != "SubscribeToShardEvent" {
		t.Errorf("another operation's answer became %q", eventTypes(msgs))
	}
}
