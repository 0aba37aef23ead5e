package jsonenc

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type inner struct {
	A int    `json:"a"`
	B string `json:"b,omitempty"`
}

// ptrMarshaler encodes itself through a pointer receiver: encoding/json
// calls it only where the value is addressable.
type ptrMarshaler struct{ N int }

func (p *ptrMarshaler) MarshalJSON() ([]byte, error) {
	return []byte(`{"via":"pointer","n":` + string(rune('0'+p.N%10)) + `}`), nil
}

type upper string

func (u upper) MarshalText() ([]byte, error) { return []byte(strings.ToUpper(string(u))), nil }

type failing struct{}

func (failing) MarshalJSON() ([]byte, error) { return nil, errors.New("refused") }

type kinds struct {
	S        string            `json:"s"`
	Bool     bool              `json:"bool"`
	I        int               `json:"i"`
	I8       int8              `json:"i8"`
	I16      int16             `json:"i16"`
	I32      int32             `json:"i32"`
	I64      int64             `json:"i64"`
	U        uint              `json:"u"`
	U8       uint8             `json:"u8"`
	U16      uint16            `json:"u16"`
	U32      uint32            `json:"u32"`
	U64      uint64            `json:"u64"`
	Uptr     uintptr           `json:"uptr"`
	F32      float32           `json:"f32"`
	F64      float64           `json:"f64"`
	Untagged string            // its Go name
	Bad      string            `json:"b\"ad"` // an invalid tag name: the Go name
	HTML     string            `json:"<&>"`   // escaped in the key
	Skip     string            `json:"-"`
	Dash     string            `json:"-,"` // named "-"
	Other    string            `json:",unknownopt"`
	hidden   string            //nolint:unused // unexported: never written
	In       inner             `json:"in"`
	InP      *inner            `json:"inp"`
	Strs     []string          `json:"strs"`
	Ins      []inner           `json:"ins"`
	Bytes    []byte            `json:"bytes"`
	Map      map[string]int    `json:"map"`
	Any      any               `json:"any"`
	When     time.Time         `json:"when"`
	WhenP    *time.Time        `json:"whenp"`
	Arr      [2]int            `json:"arr"`
	PM       ptrMarshaler      `json:"pm"`
	PMs      []ptrMarshaler    `json:"pms"`
	Up       upper             `json:"up"`
	UpMap    map[upper]string  `json:"upmap"`
	Nested   map[string][]byte `json:"nested"`
	PP       **inner           `json:"pp"`
	Num      json.Number       `json:"num"` // written bare, as a number
	NumO     json.Number       `json:"numo,omitempty"`
}

type omits struct {
	S   string         `json:"s,omitempty"`
	B   bool           `json:"b,omitempty"`
	I   int            `json:"i,omitempty"`
	U8  uint8          `json:"u8,omitempty"`
	F   float64        `json:"f,omitempty"`
	F32 float32        `json:"f32,omitempty"`
	P   *int           `json:"p,omitempty"`
	Sl  []int          `json:"sl,omitempty"`
	M   map[string]int `json:"m,omitempty"`
	A   any            `json:"a,omitempty"`
	Ar  [0]int         `json:"ar,omitempty"`
	St  inner          `json:"st,omitempty"` // never empty
	T   time.Time      `json:"t,omitempty"`  // a struct: never empty
}

type direct struct{ P *inner } // held in an interface's data word: encoded only through a pointer

type node struct {
	Name string `json:"name"`
	Next *node  `json:"next,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func sameAsEncodingJSON(t *testing.T, v any) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, ok := Append([]byte("prefix"), v)
	if wantErr != nil {
		if ok {
			t.Fatalf("%T: encoding/json fails (%v), Append wrote %s", v, wantErr, got)
		}
		if string(got) != "prefix" {
			t.Fatalf("%T: a refused Append changed dst to %q", v, got)
		}
		return
	}
	if !ok {
		t.Fatalf("%T: Append refused a value encoding/json writes as %s", v, want)
	}
	if !strings.HasPrefix(string(got), "prefix") || string(got[len("prefix"):]) != string(want) {
		t.Fatalf("%T:\n got %s\nwant prefix%s", v, got, want)
	}
}

func TestSameBytesAsEncodingJSON(t *testing.T) {
	when := time.Date(2026, 12, 7, 10, 0, 0, 123, time.UTC)
	in := &inner{A: 7, B: "x"}
	full := kinds{
		S: "a<b>&\"c\"\\\n\t\x01\u2028\u2029é\xff", Bool: true,
		I: -1, I8: -8, I16: -16, I32: -32, I64: math.MinInt64,
		U: 1, U8: 255, U16: 65535, U32: math.MaxUint32, U64: math.MaxUint64, Uptr: 9,
		F32: 3.14, F64: 1e21, Untagged: "u", Bad: "bad", HTML: "h", Skip: "never", Dash: "d", Other: "o",
		hidden: "never",
		In:     inner{A: 1}, InP: in, Strs: []string{"x", "<y>"}, Ins: []inner{{A: 2, B: "z"}, {}},
		Bytes: []byte{0, 1, 2, 250}, Map: map[string]int{"b": 2, "a": 1}, Any: []any{1, "two", nil},
		When: when, WhenP: &when, Arr: [2]int{3, 4}, PM: ptrMarshaler{N: 3}, PMs: []ptrMarshaler{{N: 5}},
		Up: "shout", UpMap: map[upper]string{"k": "v"}, Nested: map[string][]byte{"n": {1}}, PP: &in,
		Num: "12.5e3", NumO: "-0",
	}
	for _, v := range []any{
		full, &full, kinds{}, &kinds{}, (*kinds)(nil),
		kinds{Strs: []string{}, Ins: []inner{}, Bytes: []byte{}, Map: map[string]int{}},
		omits{}, &omits{},
		omits{S: "s", B: true, I: -1, U8: 1, F: math.Copysign(0, -1), F32: 1, P: ptr(0), Sl: []int{0},
			M: map[string]int{"": 0}, A: 0, St: inner{}, T: when},
		omits{Sl: []int{}, M: map[string]int{}},
		&direct{P: in}, (*direct)(nil),
		node{Name: "a", Next: &node{Name: "b", Next: &node{Name: "c"}}},
	} {
		if For(reflect.TypeOf(v)) == nil {
			t.Fatalf("%T: no Encoder", v)
		}
		sameAsEncodingJSON(t, v)
	}
}

func TestFloatsAsEncodingJSON(t *testing.T) {
	type f struct {
		F64 float64 `json:"f64"`
		F32 float32 `json:"f32"`
	}
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99e-7, 1e-7, 1.5e-9,
		123456789, 1e20, 1e21, 1.2e21, -1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.MaxFloat32, math.SmallestNonzeroFloat32, 3.4028235e38 / 3} {
		sameAsEncodingJSON(t, f{F64: x, F32: float32(x)})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		x := math.Float64frombits(r.Uint64())
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		sameAsEncodingJSON(t, f{F64: x, F32: math.Float32frombits(r.Uint32() &^ (0xff << 23))})
	}
}

// Whatever encoding/json refuses, Append hands back to it untouched.
func TestRefusedValuesGoToEncodingJSON(t *testing.T) {
	type withFailing struct {
		F failing `json:"f"`
	}
	type withFloat struct{ F float64 }
	cyclic := &node{Name: "loop"}
	type ring struct {
		M map[string]any `json:"m"`
	}
	loop := ring{M: map[string]any{}}
	loop.M["self"] = loop.M
	for _, v := range []any{
		withFailing{}, withFloat{F: math.NaN()}, withFloat{F: math.Inf(-1)},
		struct{ F float32 }{F: float32(math.Inf(1))}, loop,
	} {
		sameAsEncodingJSON(t, v)
	}
	cyclic.Next = cyclic // encoding/json refuses the cycle; so must Append
	sameAsEncodingJSON(t, cyclic)
}

// Types whose encoding depends on rules this package leaves to
// encoding/json get no Encoder.
func TestNoEncoderForWhatEncodingJSONDecides(t *testing.T) {
	type embedded struct {
		inner
		C int
	}
	type stringOpt struct {
		N int `json:"n,string"`
	}
	type omitZero struct {
		T time.Time `json:"t,omitzero"`
	}
	type twoNames struct {
		A int `json:"X"`
		X int // named X too: encoding/json keeps the tagged one
	}
	for _, v := range []any{
		embedded{}, stringOpt{}, omitZero{}, direct{}, twoNames{}, time.Time{}, ptrMarshaler{}, upper(""),
		map[string]int{}, []inner{}, 3, "s", (*any)(nil),
	} {
		if For(reflect.TypeOf(v)) != nil {
			t.Errorf("%T: an Encoder, where encoding/json must decide", v)
		}
		if _, ok := Append(nil, v); ok {
			t.Errorf("%T: Append wrote it", v)
		}
	}
	if For(nil) != nil {
		t.Error("For(nil): an Encoder")
	}
	// Nested, the same structs are encoding/json's, field by field.
	type outer struct {
		E embedded  `json:"e"`
		S stringOpt `json:"s"`
		O omitZero  `json:"o"`
		T twoNames  `json:"t"`
	}
	sameAsEncodingJSON(t, outer{E: embedded{inner: inner{A: 1}, C: 2}, S: stringOpt{N: 3}, T: twoNames{A: 1}})
}

// An Encoder writes only its own type, and sizes a Marshal from the last
// message, within a bound.
func TestEncoderOwnTypeAndSizeGuess(t *testing.T) {
	e := For(reflect.TypeFor[inner]())
	if _, ok := e.Append(nil, &inner{}); ok {
		t.Fatal("the inner Encoder wrote a *inner")
	}
	if _, ok := e.Append(nil, nil); ok {
		t.Fatal("the inner Encoder wrote nil")
	}
	got, ok := e.Marshal(inner{A: 1, B: "b"})
	if !ok || string(got) != `{"a":1,"b":"b"}` {
		t.Fatalf("Marshal: %s, %v", got, ok)
	}
	// A large message sizes the next guess, but only so far.
	large, _ := e.Marshal(inner{B: strings.Repeat("x", 1<<20)})
	small, _ := e.Marshal(inner{A: 2})
	if len(large) < 1<<20 || cap(small) > maxGuess+16 {
		t.Fatalf("after a %d-byte message a %d-byte one had a buffer of %d", len(large), len(small), cap(small))
	}
}

func TestStringsAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", " ", "~", "\x7f", "\"", "\\", "<", ">", "&", "\n", "\r", "\t", "\b", "\f",
		"\x00", "\x1f", "é", "€", "😀", "\u2028", "\u2029", "\xff", "\xc3", "\xe2\x80", "\xed\xa0\x80"}
	for range 50000 {
		var b strings.Builder
		for range r.IntN(40) {
			if r.IntN(3) == 0 {
				b.WriteString(alphabet[r.IntN(len(alphabet))])
			} else {
				b.WriteString("plainascii"[:r.IntN(10)])
			}
		}
		checkString(t, b.String())
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "abcdefgh", "abcdefg<", "\xff\xfe", "\u2028abcdefghij", strings.Repeat("x", 150)} {
		f.Add(s)
	}
	f.Fuzz(checkString)
}

func checkString(t *testing.T, s string) {
	want, _ := json.Marshal(s)
	if got := AppendString(nil, s); string(got) != string(want) {
		t.Fatalf("%q (valid UTF-8 %v):\n got %s\nwant %s", s, utf8.ValidString(s), got, want)
	}
}

func BenchmarkEvent(b *testing.B) {
	type event struct {
		ID      int    `json:"id"`
		Kind    string `json:"kind"`
		Account string `json:"account"`
		Body    string `json:"body"`
	}
	ev := &event{ID: 123456, Kind: "order.created", Account: "acct-0042", Body: strings.Repeat("x", 150)}
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(ev)
		}
	})
	b.Run("jsonenc", func(b *testing.B) {
		e := For(reflect.TypeOf(ev))
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf, _ = e.Append(buf[:0], ev)
		}
	})
}

// fuzzed holds the fuzzer's values in every shape jsonenc writes itself,
// and a few it hands to encoding/json.
type fuzzed struct {
	S    string             `json:"s"`
	SO   string             `json:"so,omitempty"`
	I    int64              `json:"i"`
	IO   int32              `json:"io,omitempty"`
	U    uint16             `json:"u,omitempty"`
	F    float64            `json:"f"`
	F32  float32            `json:"f32,omitempty"`
	B    bool               `json:"b"`
	Raw  []byte             `json:"raw"`
	P    *string            `json:"p"`
	Ss   []string           `json:"ss,omitempty"`
	In   inner              `json:"in"`
	Ins  []*inner           `json:"ins"`
	M    map[string]float64 `json:"m,omitempty"`
	Up   upper              `json:"up"`
	When *time.Time         `json:"when,omitempty"`
}

func FuzzStructAsEncodingJSON(f *testing.F) {
	f.Add("a<b", int64(-3), 1.5, true, []byte{0, 255}, uint16(7))
	f.Add("", int64(0), math.Copysign(0, -1), false, []byte(nil), uint16(0))
	f.Add("\xff\u2028", int64(math.MaxInt64), 1e21, true, []byte("x"), uint16(65535))
	f.Fuzz(func(t *testing.T, s string, i int64, x float64, b bool, raw []byte, u uint16) {
		v := fuzzed{S: s, SO: s, I: i, IO: int32(i), U: u, F: x, F32: float32(x), B: b, Raw: raw,
			Ss: strings.Fields(s), In: inner{A: int(i), B: s}, Up: upper(s)}
		if b {
			v.P = &s
			v.Ins = []*inner{{A: 1, B: s}, nil}
			v.M = map[string]float64{s: x}
			when := time.Unix(i%1e10, int64(u))
			v.When = &when
		}
		sameAsEncodingJSON(t, v)
		sameAsEncodingJSON(t, &v)
	})
}
