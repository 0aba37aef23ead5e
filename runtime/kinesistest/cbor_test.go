package kinesistest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// cborCall posts body as the Java SDK does in CBOR and decodes the answer.
func cborCall(t *testing.T, url, op string, body []byte) (int, http.Header, []byte, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", cborContentType)
	req.Header.Set("X-Amz-Target", targetPrefix+op)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != cborContentType {
		t.Fatalf("%s: Content-Type %q, want %s", op, ct, cborContentType)
	}
	d := cborDecoder{b: raw}
	v, err := d.value(0)
	if err != nil || d.off != len(raw) {
		t.Fatalf("%s: the answer is not one CBOR value (%v): % x", op, err, raw)
	}
	return res.StatusCode, res.Header, raw, v.(map[string]any)
}

// A Java client's CBOR calls (indefinite-length maps as Jackson writes them,
// blobs as byte strings, timestamps as tag 1 with epoch milliseconds) are
// served, and answered in CBOR the same way.
func TestEndpointSpeaksCBOR(t *testing.T) {
	e, err := Listen(New(), "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer e.Close()
	url := e.URL()

	// {_ "StreamName": "c", "ShardCount": 1} in indefinite length.
	create := append([]byte{0xbf}, cborHead(nil, 3, 10)...)
	create = append(create, "StreamName"...)
	create = append(create, 0x61, 'c')
	create = append(create, cborHead(nil, 3, 10)...)
	create = append(create, "ShardCount"...)
	create = append(create, 0x01, 0xff)
	if status, _, raw, _ := cborCall(t, url, "CreateStream", create); status != http.StatusOK {
		t.Fatalf("CreateStream: %d % x", status, raw)
	}

	put := cborHead(nil, 5, 3)
	put = appendCBOR(put, "", "StreamName")
	put = appendCBOR(put, "", "c")
	put = appendCBOR(put, "", "PartitionKey")
	put = appendCBOR(put, "", "k")
	put = appendCBOR(put, "", "Data")
	put = append(cborHead(put, 2, 5), "hello"...)
	if status, _, raw, out := cborCall(t, url, "PutRecord", put); status != http.StatusOK || out["ShardId"] != "shardId-000000000000" {
		t.Fatalf("PutRecord: %d %v % x", status, out, raw)
	}

	it := cborHead(nil, 5, 4)
	for _, kv := range [][2]string{{"StreamName", "c"}, {"ShardId", "shardId-000000000000"}, {"ShardIteratorType", "AT_TIMESTAMP"}} {
		it = appendCBOR(appendCBOR(it, "", kv[0]), "", kv[1])
	}
	it = appendCBOR(it, "", "Timestamp")
	it = appendCBOR(it, "Timestamp", json.Number(fmtSeconds(time.Now().Add(-time.Minute))))
	status, _, raw, out := cborCall(t, url, "GetShardIterator", it)
	iter, _ := out["ShardIterator"].(string)
	if status != http.StatusOK || iter == "" {
		t.Fatalf("GetShardIterator AT_TIMESTAMP: %d %v % x", status, out, raw)
	}

	get := appendCBOR(nil, "", map[string]any{"ShardIterator": iter})
	status, _, raw, out = cborCall(t, url, "GetRecords", get)
	recs, _ := out["Records"].([]any)
	if status != http.StatusOK || len(recs) != 1 {
		t.Fatalf("GetRecords: %d %v", status, out)
	}
	if !bytes.Contains(raw, append([]byte{0x64, 'D', 'a', 't', 'a', 0x45}, "hello"...)) {
		t.Errorf("GetRecords: Data is not the byte string hello: % x", raw)
	}
	// ApproximateArrivalTimestamp: tag 1 and an integer of milliseconds.
	key := append(cborHead(nil, 3, uint64(len("ApproximateArrivalTimestamp"))), "ApproximateArrivalTimestamp"...)
	at := bytes.Index(raw, key)
	if at < 0 || raw[at+len(key)] != 0xc1 || raw[at+len(key)+1] != 0x1b {
		t.Fatalf("GetRecords: ApproximateArrivalTimestamp not tag 1 with a 64-bit integer: % x", raw)
	}
	arrival, _ := recs[0].(map[string]any)["ApproximateArrivalTimestamp"].(json.Number).Float64()
	if d := time.Since(time.Unix(int64(arrival), 0)); d < -time.Minute || d > time.Minute {
		t.Errorf("arrival %v is not about now", arrival)
	}

	// An error: the header and a CBOR body.
	missing := appendCBOR(nil, "", map[string]any{"StreamName": "missing"})
	status, hdr, _, out := cborCall(t, url, "DescribeStreamSummary", missing)
	if status != http.StatusBadRequest || hdr.Get("X-Amzn-ErrorType") != "ResourceNotFoundException" || out["__type"] != "ResourceNotFoundException" || out["message"] == "" {
		t.Errorf("DescribeStreamSummary missing: %d %q %v", status, hdr.Get("X-Amzn-ErrorType"), out)
	}
	// Bad CBOR.
	status, hdr, _, _ = cborCall(t, url, "PutRecord", []byte{0xbf, 0x61})
	if status != http.StatusBadRequest || hdr.Get("X-Amzn-ErrorType") != "SerializationException" {
		t.Errorf("truncated CBOR: %d %q", status, hdr.Get("X-Amzn-ErrorType"))
	}
}

func fmtSeconds(t time.Time) string {
	b, _ := json.Marshal(float64(t.UnixMilli()) / 1000)
	return string(b)
}

// The decoder reads what CBOR allows a writer to choose: every integer
// width, chunked strings, half, single and double floats.
func TestCBORDecoder(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{[]byte{0x18, 0x64}, "100"},
		{[]byte{0x19, 0x03, 0xe8}, "1000"},
		{[]byte{0x3a, 0x00, 0x01, 0x86, 0x9f}, "-100000"},
		{[]byte{0x7f, 0x62, 'a', 'b', 0x61, 'c', 0xff}, `"abc"`},
		{[]byte{0x5f, 0x41, 0x01, 0x41, 0x02, 0xff}, `"AQI="`},
		{[]byte{0xf9, 0x3c, 0x00}, "1"},
		{[]byte{0xfa, 0x3f, 0xc0, 0x00, 0x00}, "1.5"},
		{[]byte{0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, "1.5"},
		{[]byte{0x9f, 0x01, 0xf5, 0xf6, 0xff}, "[1,true,null]"},
		{[]byte{0xc1, 0x1b, 0, 0, 0x01, 0x8c, 0xc2, 0x51, 0xf4, 0x00}, "1704067200"},
	} {
		d := cborDecoder{b: c.in}
		v, err := d.value(0)
		got, _ := json.Marshal(v)
		if err != nil || string(got) != c.want {
			t.Errorf("% x: %s (%v), want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range [][]byte{{}, {0x1c}, {0x62, 'a'}, {0xa1, 0x01, 0x01}, {0x9f, 0x01}} {
		d := cborDecoder{b: bad}
		if _, err := d.value(0); err == nil {
			t.Errorf("% x: decoded", bad)
		}
	}
}
