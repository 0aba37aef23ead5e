package contract

import (
	"encoding/json"
	"fmt"
	"go/token"
	"go/types"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/types/typeutil"

	"github.com/kinesisgen/kinesisgen/annotations"
	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// Schema is the subset of JSON Schema (draft 7, the AsyncAPI schema format)
// that describes what encoding/json writes for a Go type. Extensions say
// which Go declaration a schema came from, for the compatibility check.
type Schema struct {
	Ref             string             `json:"$ref,omitempty"`
	Description     string             `json:"description,omitempty"`
	Type            TypeSet            `json:"type,omitempty"`
	Format          string             `json:"format,omitempty"`
	ContentEncoding string             `json:"contentEncoding,omitempty"`
	Pattern         string             `json:"pattern,omitempty"`
	Minimum         json.Number        `json:"minimum,omitempty"`
	Maximum         json.Number        `json:"maximum,omitempty"`
	MinItems        *int               `json:"minItems,omitempty"`
	MaxItems        *int               `json:"maxItems,omitempty"`
	Items           *Schema            `json:"items,omitempty"`
	Properties      map[string]*Schema `json:"properties,omitempty"`
	Required        []string           `json:"required,omitempty"`
	PropertyNames   *Schema            `json:"propertyNames,omitempty"`
	// AdditionalProperties is the value schema of a map.
	AdditionalProperties *Schema   `json:"additionalProperties,omitempty"`
	OneOf                []*Schema `json:"oneOf,omitempty"`
	// GoType is the Go type a schema was derived from, where the JSON type
	// alone does not say it: the integer and float kinds, a named type.
	GoType string `json:"x-go-type,omitempty"`
	// GoField is the Go field name behind a property.
	GoField string `json:"x-go-field,omitempty"`
	// PartitionKey marks the header that is the record's partition key.
	PartitionKey bool `json:"x-kinesis-partition-key,omitempty"`

	// pos is the Go declaration (field or type), for diagnostics; only
	// schemas derived from code have it, not those read from a lock.
	pos token.Position
}

// TypeSet is JSON Schema's "type": one name, or several.
type TypeSet []string

func (t TypeSet) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

func (t *TypeSet) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = TypeSet{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(t))
}

func (t TypeSet) has(name string) bool { return slices.Contains(t, name) }

// nullable adds "null" to s (a nil pointer, slice or map encodes as null).
func nullable(s *Schema) *Schema {
	if len(s.Type) > 0 {
		if !s.Type.has("null") {
			s.Type = append(s.Type, "null")
		}
		return s
	}
	if len(s.Type) == 0 && s.Ref == "" && len(s.OneOf) == 0 {
		return s // open: null is already allowed
	}
	return &Schema{OneOf: []*Schema{s, {Type: TypeSet{"null"}}}}
}

// deriver turns Go types into schemas, collecting named struct types as
// definitions referenced by $ref (which also ends recursion).
type deriver struct {
	fset      *token.FileSet
	doc       func(token.Pos) string
	home      *types.Package // its types are named bare
	refPrefix string
	defs      map[string]*Schema
	names     typeutil.Map // *types.Named → definition name
	taken     map[string]bool
	diags     []annotations.Diagnostic
}

func newDeriver(fset *token.FileSet, doc func(token.Pos) string, home *types.Package, refPrefix string) *deriver {
	if doc == nil {
		doc = func(token.Pos) string { return "" }
	}
	return &deriver{fset: fset, doc: doc, home: home, refPrefix: refPrefix, defs: map[string]*Schema{}, taken: map[string]bool{}}
}

// problem is a Go type encoding/json cannot encode, at the field that has it.
func (d *deriver) problem(pos token.Position, format string, args ...any) {
	d.diags = append(d.diags, annotations.Diagnostic{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

var (
	errorType = types.Universe.Lookup("error").Type()
	byteSlice = types.NewSlice(types.Typ[types.Byte])
	// json.Marshaler and encoding.TextMarshaler, built rather than loaded.
	jsonMarshaler = marshalerIface("MarshalJSON")
	textMarshaler = marshalerIface("MarshalText")
)

func marshalerIface(method string) *types.Interface {
	res := types.NewTuple(types.NewVar(token.NoPos, nil, "", byteSlice), types.NewVar(token.NoPos, nil, "", errorType))
	sig := types.NewSignatureType(nil, nil, nil, nil, res, false)
	it := types.NewInterfaceType([]*types.Func{types.NewFunc(token.NoPos, nil, method, sig)}, nil)
	it.Complete()
	return it
}

// implements reports whether t or *t has the method set of it: a pointer
// method is used by encoding/json when the value is addressable, which the
// open schema of a marshaler covers either way.
func implements(t types.Type, it *types.Interface) bool {
	if types.Implements(t, it) {
		return true
	}
	if _, isPtr := t.Underlying().(*types.Pointer); isPtr {
		return false
	}
	if _, isIface := t.Underlying().(*types.Interface); isIface {
		return false
	}
	return types.Implements(types.NewPointer(t), it)
}

// rawRecordPath is the package of runtime.RawRecord, the message type of a
// subscriber that takes every record undecoded.
const rawRecordPath = "github.com/kinesisgen/kinesisgen/runtime"

func isRawRecord(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == rawRecordPath && n.Obj().Name() == "RawRecord"
}

func isTime(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Time"
}

// where describes the Go declaration a type is used at, for problems.
type where struct {
	pos  token.Position
	what string // "field Items of Order"
}

// schema returns the schema of what encoding/json writes for a value of t.
func (d *deriver) schema(t types.Type, at where) *Schema {
	t = types.Unalias(t)
	switch {
	case isTime(t):
		return &Schema{Type: TypeSet{"string"}, Format: "date-time", GoType: "time.Time"}
	case implements(t, jsonMarshaler):
		// Its own MarshalJSON decides: any JSON value.
		return &Schema{GoType: d.typeName(t), Description: "Encoded by its own MarshalJSON method."}
	case implements(t, textMarshaler):
		s := &Schema{Type: TypeSet{"string"}, GoType: d.typeName(t)}
		if _, isPtr := t.Underlying().(*types.Pointer); isPtr {
			s = nullable(s)
		}
		return s
	}
	if n, ok := t.(*types.Named); ok {
		if _, isStruct := n.Underlying().(*types.Struct); isStruct {
			return &Schema{Ref: d.refPrefix + d.define(n)}
		}
		s := d.schema(n.Underlying(), at)
		if len(s.OneOf) == 0 {
			s.GoType = d.typeName(n)
		}
		return s
	}
	switch u := t.(type) {
	case *types.Basic:
		return d.basic(u, at)
	case *types.Pointer:
		return nullable(d.schema(u.Elem(), at))
	case *types.Interface:
		return &Schema{GoType: d.typeName(u)} // any JSON value
	case *types.Struct:
		return d.object(u, nil, at)
	case *types.Slice:
		// encoding/json writes base64 for a slice of any byte kind, named
		// or not, unless the element marshals itself; an array is always
		// a JSON array.
		elem := types.Unalias(u.Elem())
		if b, ok := elem.Underlying().(*types.Basic); ok && b.Kind() == types.Byte && !implements(elem, jsonMarshaler) && !implements(elem, textMarshaler) {
			s := &Schema{Type: TypeSet{"string", "null"}, ContentEncoding: "base64"}
			if _, named := elem.(*types.Named); named {
				s.GoType = "[]" + d.typeName(elem)
			}
			return s
		}
		return &Schema{Type: TypeSet{"array", "null"}, Items: d.schema(u.Elem(), at)}
	case *types.Array:
		n := int(u.Len())
		return &Schema{Type: TypeSet{"array"}, Items: d.schema(u.Elem(), at), MinItems: &n, MaxItems: &n}
	case *types.Map:
		s := &Schema{Type: TypeSet{"object", "null"}, AdditionalProperties: d.schema(u.Elem(), at)}
		key := types.Unalias(u.Key())
		kb, isBasic := key.Underlying().(*types.Basic)
		switch {
		case isBasic && kb.Info()&types.IsString != 0:
		case implements(key, textMarshaler):
		case isBasic && kb.Info()&types.IsUnsigned != 0:
			s.PropertyNames = &Schema{Pattern: "^[0-9]+$"}
		case isBasic && kb.Info()&types.IsInteger != 0:
			s.PropertyNames = &Schema{Pattern: "^-?[0-9]+$"}
		default:
			d.problem(at.pos, "%s has type %s: encoding/json cannot encode a map with %s keys; tag it `json:\"-\"` or change the key type", at.what, d.typeName(t), d.typeName(key))
		}
		return s
	}
	d.problem(at.pos, "%s has type %s, which encoding/json cannot encode; tag it `json:\"-\"` or change its type", at.what, d.typeName(t))
	return &Schema{}
}

// intRanges are the bounds of the integer kinds on a 64-bit platform.
var intRanges = map[types.BasicKind][2]string{
	types.Int8: {"-128", "127"}, types.Int16: {"-32768", "32767"}, types.Int32: {"-2147483648", "2147483647"},
	types.Int64: {"-9223372036854775808", "9223372036854775807"}, types.Int: {"-9223372036854775808", "9223372036854775807"},
	types.Uint8: {"0", "255"}, types.Uint16: {"0", "65535"}, types.Uint32: {"0", "4294967295"},
	types.Uint64: {"0", "18446744073709551615"}, types.Uint: {"0", "18446744073709551615"}, types.Uintptr: {"0", "18446744073709551615"},
}

func (d *deriver) basic(b *types.Basic, at where) *Schema {
	switch {
	case b.Kind() == types.Bool:
		return &Schema{Type: TypeSet{"boolean"}}
	case b.Info()&types.IsString != 0:
		return &Schema{Type: TypeSet{"string"}}
	case b.Info()&types.IsInteger != 0:
		r := intRanges[b.Kind()]
		return &Schema{Type: TypeSet{"integer"}, Minimum: json.Number(r[0]), Maximum: json.Number(r[1]), GoType: b.Name()}
	case b.Kind() == types.Float32:
		return &Schema{Type: TypeSet{"number"}, Format: "float"}
	case b.Kind() == types.Float64:
		return &Schema{Type: TypeSet{"number"}, Format: "double"}
	}
	d.problem(at.pos, "%s has type %s, which encoding/json cannot encode; tag it `json:\"-\"` or change its type", at.what, b.Name())
	return &Schema{}
}

// typeName is t as the home package writes it.
func (d *deriver) typeName(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string {
		if p == d.home {
			return ""
		}
		return p.Name()
	})
}

// define returns the definition name of a named struct type, deriving it
// the first time.
func (d *deriver) define(n *types.Named) string {
	if name, ok := d.names.At(n).(string); ok {
		return name
	}
	name := d.defName(n)
	d.names.Set(n, name)
	def := &Schema{} // in place before the fields, for recursive types
	d.defs[name] = def
	obj := n.Obj()
	at := where{pos: d.fset.Position(obj.Pos()), what: "type " + d.typeName(n)}
	*def = *d.object(n.Underlying().(*types.Struct), n, at)
	def.Description = d.doc(obj.Pos())
	def.GoType = d.typeName(n)
	def.pos = at.pos
	return name
}

// defName is a definition name for n: its Go name, qualified by its package
// when another type took it; instantiation brackets become underscores.
func (d *deriver) defName(n *types.Named) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '.' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
				return r
			}
			return '_'
		}, s)
	}
	base := clean(d.typeName(n))
	name := base
	if d.taken[name] && n.Obj().Pkg() != nil && !strings.Contains(name, ".") {
		name = clean(n.Obj().Pkg().Name() + "." + base)
	}
	for i := 2; d.taken[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	d.taken[name] = true
	return name
}

// field is a struct field as encoding/json sees it (its typeFields).
type field struct {
	name     string
	tagged   bool
	index    []int
	typ      types.Type
	v        *types.Var
	required bool
	quoted   bool
}

// object is the schema of a struct: its fields resolved as encoding/json
// resolves them (embedded structs promoted, the shallowest or only tagged
// field of a name wins, ambiguous names dropped), in declaration order.
func (d *deriver) object(st *types.Struct, named *types.Named, at where) *Schema {
	s := &Schema{Type: TypeSet{"object"}, Properties: map[string]*Schema{}}
	owner := "struct"
	if named != nil {
		owner = named.Obj().Name()
	}
	for _, f := range jsonFields(st) {
		fat := where{pos: d.fset.Position(f.v.Pos()), what: "field " + f.v.Name() + " of " + owner}
		fs := d.schema(f.typ, fat)
		if f.quoted {
			fs = quotedSchema(fs)
		}
		if doc := d.doc(f.v.Pos()); doc != "" && fs.Description == "" {
			fs.Description = doc
		}
		fs.GoField = f.v.Name()
		fs.pos = fat.pos
		s.Properties[f.name] = fs
		if f.required {
			s.Required = append(s.Required, f.name)
		}
	}
	if len(s.Properties) == 0 {
		s.Properties = nil
	}
	s.pos = at.pos
	return s
}

// quotedSchema is the schema of a field with the ",string" option: its
// scalar written as a JSON string.
func quotedSchema(s *Schema) *Schema {
	if !s.Type.has("string") && !s.Type.has("integer") && !s.Type.has("number") && !s.Type.has("boolean") {
		return s
	}
	goType := s.GoType
	if goType == "" {
		goType = s.Type[0]
	}
	q := &Schema{Type: TypeSet{"string"}, GoType: goType + ",string"}
	if s.Type.has("null") {
		q.Type = append(q.Type, "null")
	}
	return q
}

func jsonFields(t *types.Struct) []field {
	type level struct {
		st     *types.Struct
		index  []int
		key    string
		viaPtr bool // reached through an embedded pointer, which may be nil
	}
	var fields []field
	next := []level{{st: t, key: "root"}}
	var count map[string]int // how often each struct type was reached at this depth
	nextCount := map[string]int{"root": 1}
	visited := map[string]bool{}
	for len(next) > 0 {
		current := next
		next = nil
		count, nextCount = nextCount, map[string]int{}
		for _, lv := range current {
			if visited[lv.key] {
				continue
			}
			visited[lv.key] = true
			for i := range lv.st.NumFields() {
				sf := lv.st.Field(i)
				tag := reflect.StructTag(lv.st.Tag(i)).Get("json")
				if sf.Embedded() {
					et := types.Unalias(sf.Type())
					if p, ok := et.(*types.Pointer); ok {
						et = types.Unalias(p.Elem())
					}
					if _, isStruct := et.Underlying().(*types.Struct); !sf.Exported() && !isStruct {
						continue
					}
				} else if !sf.Exported() {
					continue
				}
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !rules.JSONTagName(name) {
					name = ""
				}
				index := append(slices.Clone(lv.index), i)
				ft := types.Unalias(sf.Type())
				ptr := false
				if _, named := ft.(*types.Named); !named {
					if p, ok := ft.(*types.Pointer); ok {
						ft, ptr = types.Unalias(p.Elem()), true
					}
				}
				hasOpt := func(o string) bool { return slices.Contains(strings.Split(opts, ","), o) }
				st, isStruct := ft.Underlying().(*types.Struct)
				if name != "" || !sf.Embedded() || !isStruct {
					f := field{name: name, tagged: name != "", index: index, typ: sf.Type(), v: sf}
					if f.name == "" {
						f.name = sf.Name()
					}
					// A field of a nil embedded pointer is left out.
					f.required = !lv.viaPtr && !hasOpt("omitzero") && !(hasOpt("omitempty") && emptiable(sf.Type()))
					if hasOpt("string") {
						if b, ok := ft.Underlying().(*types.Basic); ok && b.Info()&(types.IsBoolean|types.IsNumeric|types.IsString) != 0 {
							f.quoted = true
						}
					}
					fields = append(fields, f)
					if count[lv.key] > 1 {
						// Reached twice at this depth: annihilates itself.
						fields = append(fields, fields[len(fields)-1])
					}
					continue
				}
				key := types.TypeString(ft, nil)
				nextCount[key]++
				if nextCount[key] == 1 {
					next = append(next, level{st: st, index: index, key: key, viaPtr: lv.viaPtr || ptr})
				}
			}
		}
	}
	slices.SortFunc(fields, func(a, b field) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := len(a.index) - len(b.index); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return slices.Compare(a.index, b.index)
	})
	var out []field
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		group := fields[i:j]
		i = j
		if len(group) == 1 {
			out = append(out, group[0])
			continue
		}
		// The dominant field: the shallowest, and among those the only tagged one.
		depth := len(group[0].index)
		var top []field
		for _, f := range group {
			if len(f.index) == depth {
				top = append(top, f)
			}
		}
		if len(top) == 1 || top[0].tagged && !top[1].tagged {
			out = append(out, top[0])
		}
	}
	slices.SortFunc(out, func(a, b field) int { return slices.Compare(a.index, b.index) })
	return out
}

// emptiable reports whether omitempty can leave a field of type t out.
func emptiable(t types.Type) bool {
	switch u := t.Underlying().(type) {
	case *types.Basic:
		return true
	case *types.Pointer, *types.Interface, *types.Slice, *types.Map:
		return true
	case *types.Array:
		return u.Len() == 0
	}
	return false
}
