package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// The envelope carries user headers next to the payload:
//
//	magic   4 bytes  0xFE 'k' 'g' 'E'
//	version 1 byte   envelopeVersion
//	count   uvarint  number of headers
//	count × (uvarint name length, name, uvarint value length, value)
//	payload          the rest
//
// A record without user headers is the plain payload, readable by any
// consumer. The magic starts with 0xFE, a byte that never occurs in UTF-8,
// so no JSON or text payload (BOM included) starts with it, and it differs
// from the KPL aggregate magic (0xF3 0x89 0x9A 0xC2). A headerless payload
// that happens to begin with the magic is wrapped in an envelope with no
// headers, so our own records always decode as written.
//
// Residual ambiguity: a foreign binary record (for example protobuf) that
// starts with these four bytes is taken for an envelope; it decodes if its
// next bytes form a valid header section and is an ErrDecode error
// otherwise. Payloads of text formats cannot collide.
var envelopeMagic = []byte{0xFE, 'k', 'g', 'E'}

const envelopeVersion = 1

// encodeEnvelope writes h (in name order, so equal headers give equal bytes)
// and payload into an envelope.
func encodeEnvelope(h Headers, payload []byte) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]byte, 0, envelopeLen(h, payload))
	out = append(out, envelopeMagic...)
	out = append(out, envelopeVersion)
	out = binary.AppendUvarint(out, uint64(len(names)))
	for _, k := range names {
		v := h[k]
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.AppendUvarint(out, uint64(len(v)))
		out = append(out, v...)
	}
	return append(out, payload...)
}

// encodeRecord is the data of a record: the plain payload when there are no
// headers (and it cannot be mistaken for an envelope), an envelope otherwise.
func encodeRecord(h Headers, payload []byte) []byte {
	if len(h) == 0 && !bytes.HasPrefix(payload, envelopeMagic) {
		return payload
	}
	return encodeEnvelope(h, payload)
}

// recordLen is len(encodeRecord(h, payload)), without encoding it.
func recordLen(h Headers, payload []byte) int {
	if len(h) == 0 && !bytes.HasPrefix(payload, envelopeMagic) {
		return len(payload)
	}
	return envelopeLen(h, payload)
}

// envelopeLen is len(encodeEnvelope(h, payload)).
func envelopeLen(h Headers, payload []byte) int {
	n := len(envelopeMagic) + 1 + uvarintLen(len(h)) + len(payload)
	for k, v := range h {
		n += uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v)
	}
	return n
}

// uvarintLen is how many bytes binary.AppendUvarint writes for n.
func uvarintLen(n int) int { return max(1, (bits.Len64(uint64(n))+6)/7) }

// decodeEnvelope splits a record's data into its headers and payload. Data
// without the envelope magic is a foreign or headerless record: no headers,
// the data is the payload. A corrupt envelope (truncated, a length past the
// end, an unknown version, a repeated header) is an ErrDecode error. The
// payload aliases data.
func decodeEnvelope(data []byte) (Headers, []byte, error) {
	if !bytes.HasPrefix(data, envelopeMagic) {
		return nil, data, nil
	}
	rest := data[len(envelopeMagic):]
	if len(rest) == 0 {
		return nil, nil, envelopeError("truncated before the version")
	}
	if v := rest[0]; v != envelopeVersion {
		return nil, nil, envelopeError(fmt.Sprintf("unknown version %d", v))
	}
	rest = rest[1:]
	count, rest, err := uvarint(rest, "header count")
	if err != nil {
		return nil, nil, err
	}
	// Each header takes at least two bytes, so a larger count is corrupt;
	// checking first keeps a bad count from sizing a huge map.
	if count > uint64(len(rest)/2) {
		return nil, nil, envelopeError(fmt.Sprintf("header count %d exceeds the data", count))
	}
	var h Headers
	if count > 0 {
		h = make(Headers, count)
	}
	for range count {
		var name, value []byte
		if name, rest, err = lengthPrefixed(rest, "header name"); err != nil {
			return nil, nil, err
		}
		if value, rest, err = lengthPrefixed(rest, "header value"); err != nil {
			return nil, nil, err
		}
		if _, dup := h[string(name)]; dup {
			return nil, nil, envelopeError(fmt.Sprintf("header %q repeated", name))
		}
		h[headerName(name)] = string(value)
	}
	return h, rest, nil
}

// headerName is string(name), without an allocation for the names the
// runtime itself writes (a traced record carries traceparent).
func headerName(name []byte) string {
	switch string(name) {
	case traceparentHeader:
		return traceparentHeader
	case tracestateHeader:
		return tracestateHeader
	case AttemptHeader:
		return AttemptHeader
	case ApplicationHeader:
		return ApplicationHeader
	}
	return string(name)
}

func uvarint(b []byte, what string) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, envelopeError("bad " + what)
	}
	return v, b[n:], nil
}

func lengthPrefixed(b []byte, what string) ([]byte, []byte, error) {
	n, b, err := uvarint(b, what+" length")
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(b)) {
		return nil, nil, envelopeError(fmt.Sprintf("%s length %d exceeds the data", what, n))
	}
	return b[:n], b[n:], nil
}

func envelopeError(msg string) error {
	return &Error{Kind: ErrDecode, Op: "envelope", Err: errors.New(msg)}
}

// DecodeRecord splits the data of a record this runtime published into its
// user headers and payload, for consumers outside the framework. Records of
// other producers come back as they are, without headers; a corrupt
// envelope is an ErrDecode error.
func DecodeRecord(data []byte) (Headers, []byte, error) { return decodeEnvelope(data) }

// envelopeHeader is the value of header name in data's envelope, found
// without decoding the others or allocating; ok is false when data is no
// envelope, is corrupt or has no such header. Tracing reads a record's
// trace context with it only when it needs it (see telemetry.startBatch).
func envelopeHeader(data []byte, name string) (value []byte, ok bool) {
	if !bytes.HasPrefix(data, envelopeMagic) {
		return nil, false
	}
	rest := data[len(envelopeMagic):]
	if len(rest) == 0 || rest[0] != envelopeVersion {
		return nil, false
	}
	count, n := binary.Uvarint(rest[1:])
	if n <= 0 {
		return nil, false
	}
	rest = rest[1+n:]
	for range count {
		k, r, err := lengthPrefixed(rest, "")
		if err != nil {
			return nil, false
		}
		v, r, err := lengthPrefixed(r, "")
		if err != nil {
			return nil, false
		}
		if string(k) == name {
			return v, true
		}
		rest = r
	}
	return nil, false
}
