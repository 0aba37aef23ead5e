package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/types"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/go/packages"
)

// The types below are what TestSchemaAcceptsEncodingJSON derives schemas
// for (from this file's source, through go/types) and fills with random
// values (through reflect): every encoding/json rule the deriver follows
// has a field here.

type propName string

type propText struct{ A, B byte }

func (t propText) MarshalText() ([]byte, error) { return []byte{'a' + t.A%26, 'a' + t.B%26}, nil }

func (t *propText) UnmarshalText(b []byte) error { return nil }

// propOctet is a named byte type: encoding/json writes a slice of it as
// base64, like []byte, but an array of it as numbers.
type propOctet byte

type propOctets []propOctet

// propTextOctet is a byte type with MarshalText: a slice of it is an array
// of its texts, not base64.
type propTextOctet byte

func (o propTextOctet) MarshalText() ([]byte, error) { return []byte{'a' + byte(o)%26}, nil }

type propJSON struct{ N int }

// MarshalJSON writes a value that is not an object, as such types may.
func (p propJSON) MarshalJSON() ([]byte, error) {
	if p.N%2 == 0 {
		return []byte(strconv.Itoa(p.N)), nil
	}
	return []byte(`["odd",` + strconv.Itoa(p.N) + `]`), nil
}

type propBase struct {
	Shared string `json:"Shared"` // beats PropEmbedded's untagged one
	Base   int16
	//lint:ignore U1000 an unexported field: the schema must leave it out, as encoding/json does
	hidden int
}

type PropEmbedded struct {
	Promoted uint8  `json:"promoted,omitempty"`
	Shared   string // loses to propBase's tagged field
	Deep     string `json:"deep"` // left out while the embedded pointer is nil
}

type propAmbiguousA struct{ Twice int }
type propAmbiguousB struct{ Twice string }

type propNode struct {
	Name string      `json:"name"`
	Kids []*propNode `json:"kids,omitempty"`
	Next *propNode   `json:"next"`
}

type propMessage struct {
	propBase
	*PropEmbedded
	propAmbiguousA
	propAmbiguousB

	ID       int64             `json:"id"`
	Small    int8              `json:"small"`
	Unsigned uint64            `json:"unsigned"`
	Ptr      uintptr           `json:"ptr"`
	Ratio    float32           `json:"ratio"`
	Score    float64           `json:"score,omitempty"`
	Quoted   int               `json:"quoted,string"`
	QuotedB  bool              `json:",string"`
	Flag     bool              `json:"flag,omitzero"`
	Name     propName          `json:"name"`
	At       time.Time         `json:"at"`
	AtPtr    *time.Time        `json:"at_ptr,omitempty"`
	Data     []byte            `json:"data"`
	Fixed    [3]int32          `json:"fixed"`
	Bytes    [2]byte           `json:"bytes"`
	Octets   []propOctet       `json:"octets"`
	NamedOct propOctets        `json:"named_octets"`
	OctArray [2]propOctet      `json:"oct_array"`
	TextOcts []propTextOctet   `json:"text_octets"`
	Tags     []string          `json:"tags"`
	Attrs    map[string]int    `json:"attrs"`
	ByInt    map[int]string    `json:"by_int"`
	ByUint   map[uint16]bool   `json:"by_uint"`
	ByText   map[propText]int  `json:"by_text"`
	Text     propText          `json:"text"`
	Custom   propJSON          `json:"custom"`
	Raw      json.RawMessage   `json:"raw"`
	Any      any               `json:"any"`
	Tree     propNode          `json:"tree"`
	Nested   struct{ X *bool } `json:"nested"`
	Skipped  chan int          `json:"-"`
	//lint:ignore SA5008 the field named "-", which encoding/json writes under that name
	Dash string `json:"-,"`
	//lint:ignore U1000 an unexported field: the schema must leave it out, as encoding/json does
	private string
}

// TestSchemaAcceptsEncodingJSON is the property the contract rests on: the
// schema derived from a Go type accepts every JSON value encoding/json
// writes for a value of that type.
func TestSchemaAcceptsEncodingJSON(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo, Tests: true}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		t.Fatal(err)
	}
	var pkg *packages.Package
	for _, p := range pkgs {
		if p.Types != nil && p.Types.Scope().Lookup("propMessage") != nil {
			pkg = p
		}
	}
	if pkg == nil {
		t.Fatal("the test package with propMessage did not load")
	}
	d := newDeriver(pkg.Fset, nil, pkg.Types, lockRefPrefix)
	schema := d.payload(pkg.Types.Scope().Lookup("propMessage").Type().(*types.Named))
	if len(d.diags) > 0 {
		t.Fatalf("diagnostics: %v", d.diags)
	}
	// The rules that are easy to get wrong, checked on the schema itself.
	msg := d.defs["propMessage"]
	for name, want := range map[string]bool{"Shared": true, "Base": true, "promoted": true, "Twice": false,
		"hidden": false, "private": false, "Skipped": false, "-": true, "QuotedB": true, "quoted": true} {
		if _, got := msg.Properties[name]; got != want {
			t.Errorf("property %q present = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]bool{"id": true, "deep": false, "Base": true, "score": false, "flag": false, "promoted": false, "at_ptr": false, "tags": true} {
		if got := slices.Contains(msg.Required, name); got != want {
			t.Errorf("property %q required = %v, want %v", name, got, want)
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	typ := reflect.TypeFor[propMessage]()
	for i := range 2000 {
		v := randomValue(r, typ, 0)
		b, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatalf("value %d does not encode: %v", i, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if err := validate(schema, d.defs, doc, "$"); err != nil {
			t.Fatalf("value %d: the schema refuses what encoding/json wrote: %v\n%s", i, err, b)
		}
	}

	// The validator is not a pushover: values of the wrong shape fail.
	for _, bad := range []string{`{"id":"1"}`, `{"small":300}`, `{"at":"yesterday"}`, `{"data":"**"}`, `{"octets":[1,2]}`, `{"oct_array":"AQI="}`, `{"text_octets":"AQI="}`, `{"fixed":[1,2]}`, `{"by_int":{"x":"y"}}`, `{"name":"n"}`} {
		var doc any
		dec := json.NewDecoder(strings.NewReader(bad))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if err := validate(schema, d.defs, doc, "$"); err == nil {
			t.Errorf("%s passed the schema", bad)
		}
	}
}

// randomValue fills a value of t: exported fields, nil and empty
// containers, extreme numbers, any runes; recursion stops at depth 4.
func randomValue(r *rand.Rand, t reflect.Type, depth int) reflect.Value {
	v := reflect.New(t).Elem()
	switch t {
	case reflect.TypeFor[time.Time]():
		zone := time.FixedZone("", (r.IntN(48)-24)*1800)
		v.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<34)-1<<33, r.Int64N(1e9)).In(zone)))
		return v
	case reflect.TypeFor[json.RawMessage]():
		v.SetBytes([]byte([]string{`null`, `{"a":[1,2]}`, `"s"`, `12.5`}[r.IntN(4)]))
		return v
	}
	switch t.Kind() {
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		n := int64(r.Uint64()) >> (64 - bits)
		if r.IntN(4) == 0 {
			n = []int64{0, -1, 1, -1 << (bits - 1), 1<<(bits-1) - 1}[r.IntN(5)]
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := r.Uint64() >> (64 - t.Bits())
		if r.IntN(4) == 0 {
			n = []uint64{0, 1, math.MaxUint64 >> (64 - t.Bits())}[r.IntN(3)]
		}
		v.SetUint(n)
	case reflect.Float32:
		v.SetFloat(float64(float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30)))))
	case reflect.Float64:
		v.SetFloat(r.NormFloat64() * math.Pow(10, float64(r.IntN(600)-300)))
	case reflect.String:
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteRune([]rune{'a', '"', '\\', '\n', '<', 'é', '😀', '\u2028', 0}[r.IntN(9)])
		}
		v.SetString(b.String())
	case reflect.Pointer:
		if depth < 4 && r.IntN(3) > 0 {
			v.Set(randomValue(r, t.Elem(), depth+1).Addr())
		}
	case reflect.Slice:
		if depth < 4 && r.IntN(4) > 0 {
			n := r.IntN(4)
			s := reflect.MakeSlice(t, n, n)
			for i := range n {
				s.Index(i).Set(randomValue(r, t.Elem(), depth+1))
			}
			v.Set(s)
		}
	case reflect.Array:
		for i := range t.Len() {
			v.Index(i).Set(randomValue(r, t.Elem(), depth+1))
		}
	case reflect.Map:
		if depth < 4 && r.IntN(4) > 0 {
			m := reflect.MakeMap(t)
			for range r.IntN(4) {
				m.SetMapIndex(randomValue(r, t.Key(), depth+1), randomValue(r, t.Elem(), depth+1))
			}
			v.Set(m)
		}
	case reflect.Interface:
		vals := []any{nil, "s", 1.5, true, []any{1, "x"}, map[string]any{"k": nil}}
		if x := vals[r.IntN(len(vals))]; x != nil {
			v.Set(reflect.ValueOf(x))
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if f := v.Field(i); f.CanSet() && f.Kind() != reflect.Chan {
				f.Set(randomValue(r, t.Field(i).Type, depth+1))
			}
		}
	}
	return v
}

// validate checks a decoded JSON value (numbers as json.Number) against the
// subset of JSON Schema the deriver writes.
func validate(s *Schema, defs map[string]*Schema, v any, at string) error {
	if s.Ref != "" {
		def := defs[strings.TrimPrefix(s.Ref, lockRefPrefix)]
		if def == nil {
			return fmt.Errorf("%s: dangling $ref %s", at, s.Ref)
		}
		return validate(def, defs, v, at)
	}
	if len(s.OneOf) > 0 {
		matched := 0
		for _, alt := range s.OneOf {
			if validate(alt, defs, v, at) == nil {
				matched++
			}
		}
		if matched != 1 {
			return fmt.Errorf("%s: %d alternatives of oneOf match, want 1", at, matched)
		}
	}
	if len(s.Type) > 0 && !slices.Contains(s.Type, jsonType(v)) && !(jsonType(v) == "integer" && s.Type.has("number")) {
		return fmt.Errorf("%s: %s is not of type %v", at, jsonType(v), s.Type)
	}
	switch v := v.(type) {
	case json.Number:
		n, ok := new(big.Float).SetString(string(v))
		if !ok {
			return fmt.Errorf("%s: bad number %s", at, v)
		}
		if s.Minimum != "" {
			if min, _ := new(big.Float).SetString(string(s.Minimum)); n.Cmp(min) < 0 {
				return fmt.Errorf("%s: %s < minimum %s", at, v, s.Minimum)
			}
		}
		if s.Maximum != "" {
			if max, _ := new(big.Float).SetString(string(s.Maximum)); n.Cmp(max) > 0 {
				return fmt.Errorf("%s: %s > maximum %s", at, v, s.Maximum)
			}
		}
	case string:
		if s.Format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				return fmt.Errorf("%s: not a date-time: %v", at, err)
			}
		}
		if s.ContentEncoding == "base64" {
			if _, err := base64.StdEncoding.DecodeString(v); err != nil {
				return fmt.Errorf("%s: not base64: %v", at, err)
			}
		}
		if s.Pattern != "" && !regexp.MustCompile(s.Pattern).MatchString(v) {
			return fmt.Errorf("%s: %q does not match %s", at, v, s.Pattern)
		}
	case []any:
		if s.MinItems != nil && len(v) < *s.MinItems || s.MaxItems != nil && len(v) > *s.MaxItems {
			return fmt.Errorf("%s: %d items", at, len(v))
		}
		if s.Items != nil {
			for i, e := range v {
				if err := validate(s.Items, defs, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := v[name]; !ok {
				return fmt.Errorf("%s: required %q missing", at, name)
			}
		}
		for k, e := range v {
			if s.PropertyNames != nil {
				if err := validate(s.PropertyNames, defs, k, at+" key"); err != nil {
					return err
				}
			}
			switch p := s.Properties[k]; {
			case p != nil:
				if err := validate(p, defs, e, at+"."+k); err != nil {
					return err
				}
			case s.AdditionalProperties != nil:
				if err := validate(s.AdditionalProperties, defs, e, at+"."+k); err != nil {
					return err
				}
			case s.Properties != nil:
				return fmt.Errorf("%s: property %q is not in the schema", at, k)
			}
		}
	}
	return nil
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
