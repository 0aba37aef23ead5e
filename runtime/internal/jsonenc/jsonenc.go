// Package jsonenc writes the JSON of a message byte for byte as
// encoding/json's Marshal does, without its per-value reflection: an
// Encoder is compiled once per type into field writers that read the value
// through offsets. It is the runtime's default codec's fast path, and the
// largest single cost of publishing a small message was encoding/json
// (BENCHMARKS.md, "Aggregated publishing").
//
// It takes structs (and pointers to them) of named fields; whatever it does
// not write itself (maps, interfaces, arrays, types with their own
// MarshalJSON or MarshalText, json.Number, recursive types) it hands to encoding/json
// field by field, so a message has one encoding whichever path wrote it.
// A type it cannot vouch for as a whole (embedded fields, the ",string" and
// "omitzero" options, two fields of one name) gets no Encoder: its caller
// uses encoding/json.
package jsonenc

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// Encoder writes the JSON of values of one type.
type Encoder struct {
	typ   reflect.Type
	write writer       // given the interface's data word
	size  atomic.Int64 // the last encoding's length: the next one's first guess
}

// writer appends the JSON of the value at p. ok false: the value needs
// encoding/json (its error, or a value this package does not write, such
// as a NaN).
type writer func(dst []byte, p unsafe.Pointer) (out []byte, ok bool)

var encoders sync.Map // reflect.Type → *Encoder, or noEncoder

var noEncoder = new(Encoder)

// For returns the Encoder of values of type t, or nil if encoding/json
// must encode them. It is cached: the first call per type compiles.
func For(t reflect.Type) *Encoder {
	if t == nil {
		return nil
	}
	if e, ok := encoders.Load(t); ok {
		if e == noEncoder {
			return nil
		}
		return e.(*Encoder)
	}
	e := compile(t)
	if e == nil {
		encoders.Store(t, noEncoder)
		return nil
	}
	actual, _ := encoders.LoadOrStore(t, e)
	return actual.(*Encoder)
}

// Append appends the JSON of v, as json.Marshal(v) writes it, to dst. ok
// false: v is not this Encoder's type, or it holds a value that
// encoding/json must encode (for its error, say); dst is then returned as
// it was.
func (e *Encoder) Append(dst []byte, v any) (out []byte, ok bool) {
	if reflect.TypeOf(v) != e.typ {
		return dst, false
	}
	// The interface's data word: the pointer, or (for a struct) where the
	// value is.
	p := (*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1]
	n := len(dst)
	out, ok = e.write(dst, p)
	if !ok {
		return dst[:n], false
	}
	e.size.Store(int64(len(out) - n))
	return out, true
}

// Marshal returns the JSON of v as json.Marshal does, in a slice sized
// from the last value encoded, up to maxGuess: one large message must not
// make every small one after it allocate as much.
func (e *Encoder) Marshal(v any) ([]byte, bool) {
	return e.Append(make([]byte, 0, min(e.size.Load(), maxGuess)+16), v)
}

const maxGuess = 16 << 10

// Append appends the JSON of v to dst if its type has an Encoder.
func Append(dst []byte, v any) ([]byte, bool) {
	e := For(reflect.TypeOf(v))
	if e == nil {
		return dst, false
	}
	return e.Append(dst, v)
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	numberType        = reflect.TypeFor[json.Number]()
)

// compile builds t's Encoder: t must be a struct, or a pointer to one,
// that structWriter takes.
func compile(t reflect.Type) *Encoder {
	if ownEncoding(t) {
		return nil
	}
	c := compiler{building: map[reflect.Type]bool{}}
	var w writer
	switch {
	case t.Kind() == reflect.Struct && !directIface(t):
		w = c.structWriter(t, false)
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !ownEncoding(t.Elem()):
		// The data word is the pointer itself.
		if sw := c.structWriter(t.Elem(), true); sw != nil {
			w = func(dst []byte, p unsafe.Pointer) ([]byte, bool) {
				if p == nil {
					return append(dst, "null"...), true
				}
				return sw(dst, p)
			}
		}
	}
	if w == nil {
		return nil
	}
	return &Encoder{typ: t, write: w}
}

// ownEncoding says whether values of t, or pointers to them, encode
// themselves (json.Marshaler, encoding.TextMarshaler).
func ownEncoding(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		pt.Implements(marshalerType) || pt.Implements(textMarshalerType)
}

// directIface mirrors the compiler's rule for which types an interface
// holds in its data word: pointer-shaped ones, and structs and arrays of
// exactly one such. A struct held so (a lone pointer field) gets no
// Encoder: its address would be a copy's, allocated per call.
func directIface(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Chan, reflect.Map, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Struct:
		return t.NumField() == 1 && directIface(t.Field(0).Type)
	case reflect.Array:
		return t.Len() == 1 && directIface(t.Elem())
	}
	return false
}

type compiler struct {
	building map[reflect.Type]bool // structs being compiled: a type met again is recursive
}

// field is one struct field's part of the JSON object.
type field struct {
	name      []byte // `"name":`, escaped as encoding/json escapes it
	offset    uintptr
	write     writer
	omitEmpty bool
	empty     func(p unsafe.Pointer) bool
}

// structWriter compiles a struct's writer, or returns nil if encoding/json
// must write the whole struct. addressable says whether encoding/json
// reaches the struct through a pointer: its fields' pointer-receiver
// MarshalJSON methods count only then.
func (c *compiler) structWriter(t reflect.Type, addressable bool) writer {
	if c.building[t] {
		return nil
	}
	c.building[t] = true
	defer delete(c.building, t)
	var fields []field
	seen := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil // embedded fields: encoding/json's promotion rules
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !rules.JSONTagName(name) {
			name = sf.Name
		}
		omitEmpty := false
		for opt := range strings.SplitSeq(opts, ",") {
			switch opt {
			case "omitempty":
				omitEmpty = true
			case "string", "omitzero":
				return nil
			}
		}
		if seen[name] {
			return nil // encoding/json drops both, or picks by depth
		}
		seen[name] = true
		quoted, _ := json.Marshal(name)
		f := field{
			name:      append(quoted, ':'),
			offset:    sf.Offset,
			write:     c.valueWriter(sf.Type, addressable),
			omitEmpty: omitEmpty,
		}
		if omitEmpty {
			f.empty = emptyFunc(sf.Type)
		}
		fields = append(fields, f)
	}
	return func(dst []byte, p unsafe.Pointer) ([]byte, bool) {
		dst = append(dst, '{')
		first := true
		for i := range fields {
			f := &fields[i]
			fp := unsafe.Add(p, f.offset)
			if f.omitEmpty && f.empty(fp) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.name...)
			var ok bool
			if dst, ok = f.write(dst, fp); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	}
}

// valueWriter compiles the writer of a value of type t: its own, or
// encoding/json's through fallbackWriter.
func (c *compiler) valueWriter(t reflect.Type, addressable bool) writer {
	if ownEncoding(t) || t == numberType { // a json.Number is written bare, as a number
		return fallbackWriter(t, addressable)
	}
	switch t.Kind() {
	case reflect.String:
		return writeString
	case reflect.Bool:
		return writeBool
	case reflect.Int:
		return writeInt[int]
	case reflect.Int8:
		return writeInt[int8]
	case reflect.Int16:
		return writeInt[int16]
	case reflect.Int32:
		return writeInt[int32]
	case reflect.Int64:
		return writeInt[int64]
	case reflect.Uint:
		return writeUint[uint]
	case reflect.Uint8:
		return writeUint[uint8]
	case reflect.Uint16:
		return writeUint[uint16]
	case reflect.Uint32:
		return writeUint[uint32]
	case reflect.Uint64:
		return writeUint[uint64]
	case reflect.Uintptr:
		return writeUint[uintptr]
	case reflect.Float32:
		return writeFloat32
	case reflect.Float64:
		return writeFloat64
	case reflect.Struct:
		if w := c.structWriter(t, addressable); w != nil {
			return w
		}
	case reflect.Pointer:
		// A pointer whose element encodes itself was caught above: *T's
		// method set holds T's. What it points to is addressable.
		return pointerWriter(c.valueWriter(t.Elem(), true))
	case reflect.Slice:
		// encoding/json writes a []byte (whose elements do not encode
		// themselves) in base64; a slice's elements are addressable.
		if t.Elem().Kind() == reflect.Uint8 && !ownEncoding(t.Elem()) {
			return writeBytes
		}
		return sliceWriter(c.valueWriter(t.Elem(), true), t.Elem().Size())
	}
	return fallbackWriter(t, addressable)
}

// fallbackWriter has encoding/json write a value of type t: handed a
// pointer when the value is addressable where it sits, as encoding/json
// then calls pointer-receiver methods, and the value itself otherwise.
func fallbackWriter(t reflect.Type, addressable bool) writer {
	return func(dst []byte, p unsafe.Pointer) ([]byte, bool) {
		v := reflect.NewAt(t, p)
		if !addressable {
			v = v.Elem()
		}
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return dst, false
		}
		return append(dst, b...), true
	}
}

func pointerWriter(elem writer) writer {
	return func(dst []byte, p unsafe.Pointer) ([]byte, bool) {
		q := *(*unsafe.Pointer)(p)
		if q == nil {
			return append(dst, "null"...), true
		}
		return elem(dst, q)
	}
}

// sliceHeader is the layout of a slice.
type sliceHeader struct {
	data unsafe.Pointer
	len  int
	cap  int
}

func sliceWriter(elem writer, size uintptr) writer {
	return func(dst []byte, p unsafe.Pointer) ([]byte, bool) {
		s := (*sliceHeader)(p)
		if s.data == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '[')
		for i := range s.len {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = elem(dst, unsafe.Add(s.data, uintptr(i)*size)); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	}
}

func writeBytes(dst []byte, p unsafe.Pointer) ([]byte, bool) {
	b := *(*[]byte)(p)
	if b == nil {
		return append(dst, "null"...), true
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"'), true
}

func writeString(dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return AppendString(dst, *(*string)(p)), true
}

func writeBool(dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return strconv.AppendBool(dst, *(*bool)(p)), true
}

func writeInt[T int | int8 | int16 | int32 | int64](dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return strconv.AppendInt(dst, int64(*(*T)(p)), 10), true
}

func writeUint[T uint | uint8 | uint16 | uint32 | uint64 | uintptr](dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return strconv.AppendUint(dst, uint64(*(*T)(p)), 10), true
}

func writeFloat32(dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return appendFloat(dst, float64(*(*float32)(p)), 32)
}

func writeFloat64(dst []byte, p unsafe.Pointer) ([]byte, bool) {
	return appendFloat(dst, *(*float64)(p), 64)
}

// appendFloat is encoding/json's floatEncoder: the shortest decimal that
// reads back as f, in exponent form outside [1e-6, 1e21), its exponent
// without a leading zero. NaN and the infinities are encoding/json's to
// refuse.
func appendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// emptyFunc is encoding/json's isEmptyValue for a field of type t.
func emptyFunc(t reflect.Type) func(p unsafe.Pointer) bool {
	switch t.Kind() {
	case reflect.String:
		return func(p unsafe.Pointer) bool { return len(*(*string)(p)) == 0 }
	case reflect.Bool:
		return func(p unsafe.Pointer) bool { return !*(*bool)(p) }
	case reflect.Pointer:
		return func(p unsafe.Pointer) bool { return *(*unsafe.Pointer)(p) == nil }
	case reflect.Slice:
		return func(p unsafe.Pointer) bool { return (*sliceHeader)(p).len == 0 }
	case reflect.Struct:
		return func(unsafe.Pointer) bool { return false }
	}
	// The rest through reflection: encoding/json's isEmptyValue.
	return func(p unsafe.Pointer) bool {
		v := reflect.NewAt(t, p).Elem()
		switch v.Kind() {
		case reflect.Array, reflect.Map:
			return v.Len() == 0
		case reflect.Interface,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
			reflect.Float32, reflect.Float64:
			return v.IsZero() // a float's -0 is not empty
		}
		return false
	}
}
