package runtime

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		headers Headers
		payload []byte
	}{
		{name: "headers and JSON", headers: Headers{"trace": "abc", "tenant": "t1"}, payload: []byte(`{"id":1}`)},
		{name: "values a text format would break", headers: Headers{"a": "x\ny: z", "b": "\x00\xff", "": "empty name"}, payload: []byte("p")},
		{name: "empty payload", headers: Headers{"k": "v"}, payload: nil},
		{name: "no headers, plain payload", payload: []byte(`{"id":2}`)},
		{name: "no headers, payload that starts like an envelope", payload: append(bytes.Clone(envelopeMagic), 9, 9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := encodeRecord(tt.headers, tt.payload)
			if len(tt.headers) == 0 && !bytes.HasPrefix(tt.payload, envelopeMagic) && !bytes.Equal(data, tt.payload) {
				t.Errorf("a record without headers must be the plain payload, got %q", data)
			}
			h, p, err := decodeEnvelope(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !maps.Equal(h, tt.headers) || !bytes.Equal(p, tt.payload) {
				t.Errorf("decoded %v %q, want %v %q", h, p, tt.headers, tt.payload)
			}
		})
	}
}

func TestDecodeForeignRecords(t *testing.T) {
	// Records other producers wrote: each is read as a headerless payload.
	foreign := [][]byte{
		[]byte(`{"order":1}`),
		[]byte(`["a"]`),
		[]byte("\xef\xbb\xbf{\"bom\":true}"), // UTF-8 BOM then JSON
		[]byte("plain text, with | pipes: and\nnewlines"),
		[]byte("\x0a\x03abc"),    // a protobuf message
		{0xF3, 0x89, 0x9A, 0xC2}, // the KPL magic is not ours
		{0xFE},                   // a prefix of our magic is not our magic
		{},
	}
	for _, data := range foreign {
		h, p, err := decodeEnvelope(data)
		if err != nil || h != nil || !bytes.Equal(p, data) {
			t.Errorf("foreign %q decoded as %v %q %v, want no headers and the data", data, h, p, err)
		}
	}
}

func TestDecodeCorruptEnvelopes(t *testing.T) {
	good := encodeEnvelope(Headers{"trace": "abc"}, []byte("payload"))
	m := string(envelopeMagic)
	tests := map[string][]byte{
		"magic only":             []byte(m),
		"unknown version":        []byte(m + "\x02\x00"),
		"version 0":              []byte(m + "\x00\x00"), // below the only version, not a synonym for it
		"version 255":            []byte(m + "\xff\x00"),
		"truncated count":        []byte(m + "\x01"),
		"bad varint":             []byte(m + "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
		"count past the data":    []byte(m + "\x01\x05\x01a"),
		"name length past end":   []byte(m + "\x01\x01\x09ab"),
		"value length past end":  []byte(m + "\x01\x01\x01a\x09b"),
		"truncated value length": []byte(m + "\x01\x01\x01a"),
		"repeated header":        []byte(m + "\x01\x02\x01a\x01b\x01a\x01c"),
		"truncated good":         good[:len(envelopeMagic)+4],
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := decodeEnvelope(data)
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("decode %q: %v, want ErrDecode", data, err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *runtime.Error", err)
			}
		})
	}
}

func FuzzEnvelope(f *testing.F) {
	f.Add([]byte("trace"), []byte("abc"), []byte(`{"id":1}`), true)
	f.Add([]byte(""), []byte(""), []byte("plain"), false)
	f.Add(envelopeMagic, []byte{1, 0}, append(bytes.Clone(envelopeMagic), 1, 0), false)
	f.Fuzz(func(t *testing.T, name, value, payload []byte, withHeader bool) {
		// Any data: decoding never panics, and what decodes re-encodes to
		// something that decodes the same.
		if h, p, err := decodeEnvelope(payload); err == nil {
			h2, p2, err := decodeEnvelope(encodeRecord(h, p))
			if err != nil || !maps.Equal(h, h2) || !bytes.Equal(p, p2) {
				t.Fatalf("re-encode of %q: %v %q %v, want %v %q", payload, h2, p2, err, h, p)
			}
		} else if !errors.Is(err, ErrDecode) {
			t.Fatalf("decode error %v is not ErrDecode", err)
		}
		// Encode then decode gives back headers and payload.
		var h Headers
		if withHeader {
			h = Headers{string(name): string(value), "fixed": "v"}
		}
		got, p, err := decodeEnvelope(encodeRecord(h, payload))
		if err != nil || !maps.Equal(got, h) || !bytes.Equal(p, payload) {
			t.Fatalf("round trip of %v %q: %v %q %v", h, payload, got, p, err)
		}
	})
}

func TestRecordLenIsTheEncodedLength(t *testing.T) {
	long := string(bytes.Repeat([]byte("v"), 20000)) // lengths of one, two and three varint bytes
	for _, tt := range []struct {
		headers Headers
		payload []byte
	}{
		{nil, []byte(`{"id":1}`)},
		{nil, append(bytes.Clone(envelopeMagic), 1)},
		{Headers{"trace": "abc"}, nil},
		{Headers{"a": long[:127], long[:128]: long, "": ""}, []byte(long)},
	} {
		if got, want := recordLen(tt.headers, tt.payload), len(encodeRecord(tt.headers, tt.payload)); got != want {
			t.Errorf("recordLen of %d headers and %d bytes = %d, want %d", len(tt.headers), len(tt.payload), got, want)
		}
	}
}
