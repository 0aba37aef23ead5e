package kinesistest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/smithy-go"
)

// The Java SDK (v1 and v2) speaks Kinesis in CBOR unless told otherwise
// (AWS_CBOR_DISABLE): the same shapes as the JSON protocol, with blobs as
// byte strings and timestamps as epoch milliseconds (tag 1). An Endpoint
// translates such a call to JSON and its answer back, so the operations
// are served once. SubscribeToShard's event stream stays JSON: a Java
// client subscribing needs CBOR disabled.

const cborContentType = "application/x-amz-cbor-1.1"

// withCBOR translates CBOR calls for next, which speaks JSON.
func withCBOR(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), cborContentType) {
			next(w, r)
			return
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var in any = map[string]any{}
		if len(raw) > 0 {
			d := cborDecoder{b: raw}
			in, err = d.value(0)
			if err == nil && d.off != len(raw) {
				err = errors.New("data after the value")
			}
		}
		if err != nil {
			writeCBORError(w, &smithy.GenericAPIError{Code: "SerializationException", Message: "CBOR: " + err.Error()})
			return
		}
		body, err := json.Marshal(in)
		if err != nil {
			writeCBORError(w, &smithy.GenericAPIError{Code: "SerializationException", Message: err.Error()})
			return
		}
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		r2.Header.Set("Content-Type", "application/x-amz-json-1.1")
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SubscribeToShard") {
			next(w, r2) // an event stream, in JSON
			return
		}
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		next(rec, r2)
		out := rec.body.Bytes()
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", cborContentType)
		var j any
		jd := json.NewDecoder(bytes.NewReader(out))
		jd.UseNumber()
		if err := jd.Decode(&j); err != nil {
			w.WriteHeader(rec.status)
			return
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.status)
		_, _ = w.Write(appendCBOR(nil, "", j))
	}
}

func writeCBORError(w http.ResponseWriter, err *smithy.GenericAPIError) {
	w.Header().Set("Content-Type", cborContentType)
	w.Header().Set("X-Amzn-ErrorType", err.Code)
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(appendCBOR(nil, "", map[string]any{"__type": err.Code, "message": err.Message}))
}

// bufferedResponse holds a JSON answer for translation.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

// cborDecoder reads a CBOR value as the JSON protocol's decoder would read
// the JSON: byte strings as base64 text, timestamps (tag 1, epoch
// milliseconds from the Java SDK; seconds when small) as epoch seconds.
type cborDecoder struct {
	b   []byte
	off int
}

var errShort = errors.New("unexpected end of data")

func (d *cborDecoder) head() (major, info byte, arg uint64, err error) {
	if d.off >= len(d.b) {
		return 0, 0, 0, errShort
	}
	c := d.b[d.off]
	d.off++
	major, info = c>>5, c&0x1f
	n := 0
	switch {
	case info < 24:
		return major, info, uint64(info), nil
	case info == 24:
		n = 1
	case info == 25:
		n = 2
	case info == 26:
		n = 4
	case info == 27:
		n = 8
	case info == 31:
		return major, info, 0, nil // indefinite length, or break
	default:
		return 0, 0, 0, fmt.Errorf("reserved additional information %d", info)
	}
	if d.off+n > len(d.b) {
		return 0, 0, 0, errShort
	}
	for _, c := range d.b[d.off : d.off+n] {
		arg = arg<<8 | uint64(c)
	}
	d.off += n
	return major, info, arg, nil
}

func (d *cborDecoder) isBreak() bool {
	if d.off < len(d.b) && d.b[d.off] == 0xff {
		d.off++
		return true
	}
	return false
}

// str reads a byte or text string's content, chunked or not.
func (d *cborDecoder) str(major, info byte, arg uint64) ([]byte, error) {
	if info == 31 {
		var out []byte
		for !d.isBreak() {
			m, i, a, err := d.head()
			if err != nil {
				return nil, err
			}
			if m != major || i == 31 {
				return nil, errors.New("bad chunk of an indefinite-length string")
			}
			chunk, err := d.str(m, i, a)
			if err != nil {
				return nil, err
			}
			out = append(out, chunk...)
		}
		return out, nil
	}
	if arg > uint64(len(d.b)-d.off) {
		return nil, errShort
	}
	s := d.b[d.off : d.off+int(arg)]
	d.off += int(arg)
	return s, nil
}

func (d *cborDecoder) value(depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("nested too deeply")
	}
	major, info, arg, err := d.head()
	if err != nil {
		return nil, err
	}
	switch major {
	case 0:
		return json.Number(strconv.FormatUint(arg, 10)), nil
	case 1:
		if arg > math.MaxInt64 {
			return nil, errors.New("negative integer out of range")
		}
		return json.Number(strconv.FormatInt(-1-int64(arg), 10)), nil
	case 2:
		s, err := d.str(major, info, arg)
		return base64.StdEncoding.EncodeToString(s), err
	case 3:
		s, err := d.str(major, info, arg)
		return string(s), err
	case 4:
		out := []any{}
		for i := uint64(0); info == 31 || i < arg; i++ {
			if info == 31 && d.isBreak() {
				break
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case 5:
		out := map[string]any{}
		for i := uint64(0); info == 31 || i < arg; i++ {
			if info == 31 && d.isBreak() {
				break
			}
			k, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, errors.New("a map key that is not text")
			}
			if out[ks], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case 6:
		v, err := d.value(depth + 1)
		if err != nil || arg != 1 {
			return v, err
		}
		n, ok := v.(json.Number)
		if !ok {
			return v, nil
		}
		f, err := n.Float64()
		if err != nil {
			return nil, err
		}
		if math.Abs(f) > 1e11 { // milliseconds (the Java SDK's), not seconds
			f /= 1000
		}
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64)), nil
	default: // 7
		switch {
		case info == 20:
			return false, nil
		case info == 21:
			return true, nil
		case info == 22 || info == 23:
			return nil, nil
		case info == 25:
			return floatNumber(float64(half(uint16(arg))))
		case info == 26:
			return floatNumber(float64(math.Float32frombits(uint32(arg))))
		case info == 27:
			return floatNumber(math.Float64frombits(arg))
		}
		return nil, fmt.Errorf("unsupported simple value %d", info)
	}
}

func floatNumber(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errors.New("a number JSON cannot hold")
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// half converts an IEEE 754 half-precision float.
func half(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0:
		f := float32(frac) / 1024 / 16384
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// appendCBOR writes a JSON answer (decoded with UseNumber) as CBOR: the
// member Data (a record's blob) as a byte string, members named
// ...Timestamp as tag 1 with epoch milliseconds, as the Java SDK reads
// them.
func appendCBOR(b []byte, key string, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 0xf6)
	case bool:
		if v {
			return append(b, 0xf5)
		}
		return append(b, 0xf4)
	case string:
		if key == "Data" {
			if raw, err := base64.StdEncoding.DecodeString(v); err == nil {
				b = cborHead(b, 2, uint64(len(raw)))
				return append(b, raw...)
			}
		}
		b = cborHead(b, 3, uint64(len(v)))
		return append(b, v...)
	case json.Number:
		if strings.HasSuffix(key, "Timestamp") {
			if f, err := v.Float64(); err == nil {
				b = cborHead(b, 6, 1)
				return appendCBORInt(b, int64(math.Round(f*1000)))
			}
		}
		if i, err := v.Int64(); err == nil {
			return appendCBORInt(b, i)
		}
		f, _ := v.Float64()
		b = append(b, 0xfb)
		return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	case []any:
		b = cborHead(b, 4, uint64(len(v)))
		for _, e := range v {
			b = appendCBOR(b, key, e)
		}
		return b
	case map[string]any:
		b = cborHead(b, 5, uint64(len(v)))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = cborHead(b, 3, uint64(len(k)))
			b = append(b, k...)
			b = appendCBOR(b, k, v[k])
		}
		return b
	}
	return append(b, 0xf6)
}

func appendCBORInt(b []byte, i int64) []byte {
	if i >= 0 {
		return cborHead(b, 0, uint64(i))
	}
	return cborHead(b, 1, uint64(-1-i))
}

func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= math.MaxUint8:
		return append(b, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), n)
}
