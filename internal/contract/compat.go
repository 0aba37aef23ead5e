package contract

import (
	"cmp"
	"encoding/json"
	"fmt"
	"go/token"
	"go/types"
	"maps"
	"math/big"
	"slices"
	"strings"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// Breaks returns the breaking changes from old, the lock at lockPath (its
// content lockSrc), to cur, derived from the code: each is a change after
// which records already on a stream, written by the old code, are not read
// by the new code as they were. The position is the field or marker that
// broke it, or the lock's entry for what the code no longer has.
//
// Compatible changes are not reported: a new field, message or subscriber,
// a removed subscriber, a wider integer, a number field that took integers,
// a pointer, a field that became a string from a time or bytes.
func Breaks(old, cur *Lock, lockPath string, lockSrc []byte) []annotations.Diagnostic {
	return breaks(old, cur, lockPath, lockSrc)
}

// Notices lists the changes from old to cur that are compatible for the
// runtime but may break other consumers of a stream, to warn about: a
// message now published as KPL aggregates. The position is the marker key.
func Notices(old, cur *Lock) []annotations.Diagnostic {
	var ds []annotations.Diagnostic
	for _, name := range slices.Sorted(maps.Keys(cur.Messages)) {
		om, nm := old.Messages[name], cur.Messages[name]
		if om == nil || om.Aggregate || !nm.Aggregate {
			continue
		}
		m := cur.pkg.message(name)
		pos := m.Marker.Pos
		if p, ok := m.Marker.KeyPos["aggregate"]; ok {
			pos = p
		}
		ds = append(ds, annotations.Diagnostic{Pos: pos, Msg: fmt.Sprintf("warning: message %s is now published as KPL aggregates: "+
			"consumers of stream %s that do not deaggregate break (kinesisgen's runtime, the KCL and Lambda's KPL support deaggregate); "+
			"make sure every consumer does before deploying", name, nm.Stream)})
	}
	return ds
}

func breaks(old, cur *Lock, lockPath string, lockSrc []byte) []annotations.Diagnostic {
	c := &comparer{old: old, cur: cur, seen: map[[2]string]bool{}}
	inLock := func(needle string) token.Position {
		line, col := lineOf(lockSrc, needle)
		return token.Position{Filename: lockPath, Line: line, Column: col}
	}
	p := cur.pkg
	for _, name := range slices.Sorted(maps.Keys(old.Messages)) {
		om := old.Messages[name]
		nm, m := cur.Messages[name], p.message(name)
		if nm == nil {
			c.add(inLock(fmt.Sprintf("%q: {", name)), "//kinesis:message %s was removed (or renamed), but records of it stay on stream %s until they expire", name, om.Stream)
			continue
		}
		if nm.Stream != om.Stream {
			c.add(m.Marker.KeyPos["stream"], "//kinesis:message %s moved from stream %s to %s: its consumers on %s stop receiving it, and records already on %s are not read by readers of %s", name, om.Stream, nm.Stream, om.Stream, om.Stream, nm.Stream)
		}
		c.stream = om.Stream
		c.schema(om.Payload, nm.Payload, site{pos: p.Fset.Position(m.Type.Obj().Pos()), what: "message " + name})
		c.headers(name, om.Headers, nm.Headers, m)
	}
	for _, name := range slices.Sorted(maps.Keys(old.Subscribers)) {
		os, ns := old.Subscribers[name], cur.Subscribers[name]
		if ns == nil {
			continue // no longer reading a stream breaks no record
		}
		var s *Subscriber
		for _, x := range p.Subscribers {
			if x.Name == name {
				s = x
			}
		}
		if ns.Stream != os.Stream {
			c.add(s.Marker.KeyPos["stream"], "subscriber %s moved from stream %s to %s: records still arriving on %s are no longer handled", name, os.Stream, ns.Stream, os.Stream)
			continue
		}
		if m := p.messageOf(s.Message); m != nil && old.Messages[m.Name] != nil && m.Name == os.Message {
			continue // compared as the message
		}
		c.stream = os.Stream
		c.schema(os.Payload, ns.Payload, site{pos: s.Pos, what: "the message of subscriber " + name})
	}
	return sortDiags(c.diags)
}

type comparer struct {
	old, cur *Lock
	stream   string
	seen     map[[2]string]bool // definition pairs compared, for recursive types
	diags    []annotations.Diagnostic
}

func (c *comparer) add(pos token.Position, format string, args ...any) {
	c.diags = append(c.diags, annotations.Diagnostic{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// site is what a schema belongs to and where the code declares it.
type site struct {
	pos  token.Position
	what string // `field Total of Order (JSON "total")`
}

// resolve follows $ref into defs and drops the null alternative of a
// pointer: a JSON null decodes into any Go type as a no-op.
func resolve(s *Schema, defs map[string]*Schema) (*Schema, string) {
	ref := ""
	for s != nil {
		switch {
		case s.Ref != "":
			ref = strings.TrimPrefix(s.Ref, lockRefPrefix)
			s = defs[ref]
		case len(s.OneOf) == 2 && slices.Equal(s.OneOf[1].Type, TypeSet{"null"}):
			s = s.OneOf[0]
		default:
			return s, ref
		}
	}
	return &Schema{}, ref
}

// kind is the JSON type of a schema, null left out: "" for any value.
func kind(s *Schema) string {
	for _, t := range s.Type {
		if t != "null" {
			return t
		}
	}
	return ""
}

// describe names a schema's type for a message: its Go type when known.
func describe(s *Schema) string {
	switch {
	case s.GoType != "":
		return s.GoType
	case s.Format == "date-time":
		return "time.Time"
	case s.ContentEncoding == "base64":
		return "[]byte"
	case kind(s) == "number" && s.Format == "float":
		return "float32"
	case kind(s) == "number":
		return "float64"
	case kind(s) == "":
		return "any JSON value"
	}
	return "a JSON " + kind(s)
}

// schema reports where values that old describes are not decoded by a
// Go type that cur describes.
func (c *comparer) schema(oldS, curS *Schema, at site) {
	o, oref := resolve(oldS, c.old.Definitions)
	n, nref := resolve(curS, c.cur.Definitions)
	if oref != "" && nref != "" {
		key := [2]string{oref, nref}
		if c.seen[key] {
			return
		}
		c.seen[key] = true
	}
	ok, nk := kind(o), kind(n)
	changed := func(why string) {
		c.add(at.pos, "%s changed from %s to %s: records already on stream %s %s", at.what, describe(o), describe(n), c.stream, why)
	}
	switch {
	case nk == "":
		return // the new type takes any JSON value
	case ok == "":
		changed("may hold any JSON value, which the new type cannot decode")
		return
	case ok == "integer" && nk == "number":
		return // an integer decodes into a float
	case ok == "array" && nk == "string" && n.ContentEncoding == "base64" && byteItems(o.Items, c.old.Definitions):
		// encoding/json decodes an array of numbers into a byte slice as
		// well as base64 (and a lock written before slices of named byte
		// types were described as base64 said array for the same type).
		return
	case ok != nk:
		changed(fmt.Sprintf("hold a JSON %s, which the new type cannot decode", ok))
		return
	}
	switch nk {
	case "integer":
		if !within(o, n) {
			changed(fmt.Sprintf("may hold values outside %s..%s, which the new type cannot decode", n.Minimum, n.Maximum))
		}
	case "number":
		if o.Format != "float" && n.Format == "float" {
			changed("may hold values beyond float32, which the new type cannot decode")
		}
	case "string":
		switch {
		case n.Format == "date-time" && o.Format != "date-time":
			changed("hold strings that need not be RFC 3339 times")
		case n.ContentEncoding == "base64" && o.ContentEncoding != "base64":
			changed("hold strings that need not be base64")
		case n.Pattern != "" && n.Pattern != o.Pattern && !(o.Pattern == "^[0-9]+$" && n.Pattern == "^-?[0-9]+$"):
			changed(fmt.Sprintf("hold strings that need not match %s", n.Pattern))
		}
	case "array":
		if o.Items != nil && n.Items != nil {
			c.schema(o.Items, n.Items, site{pos: at.pos, what: "the elements of " + at.what})
		}
	case "object":
		switch oMap, nMap := o.AdditionalProperties != nil, n.AdditionalProperties != nil; {
		case oMap && !nMap && len(n.Properties) > 0:
			c.add(at.pos, "%s changed from a map to the struct %s: records already on stream %s hold keys the struct does not decode", at.what, describe(n), c.stream)
			return
		case !oMap && nMap:
			// Each field of the old struct is now a key of the map.
			for _, name := range slices.Sorted(maps.Keys(o.Properties)) {
				c.schema(o.Properties[name], n.AdditionalProperties, site{pos: at.pos, what: fmt.Sprintf("the values of %s (once the field %q)", at.what, name)})
			}
			return
		}
		if nref != "" && n.GoType != "" {
			at.what = n.GoType
		}
		c.object(o, n, site{pos: cmp.Or(n.pos, at.pos), what: at.what})
	}
}

// byteItems reports whether items describes integers within 0..255.
func byteItems(items *Schema, defs map[string]*Schema) bool {
	if items == nil {
		return false
	}
	it, _ := resolve(items, defs)
	return kind(it) == "integer" && within(it, &Schema{Minimum: "0", Maximum: "255"})
}

// within reports whether the integer range of o fits in that of n.
func within(o, n *Schema) bool {
	num := func(s string) *big.Int {
		v, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil
		}
		return v
	}
	omin, omax, nmin, nmax := num(string(o.Minimum)), num(string(o.Maximum)), num(string(n.Minimum)), num(string(n.Maximum))
	if nmin != nil && (omin == nil || omin.Cmp(nmin) < 0) {
		return false
	}
	return nmax == nil || omax != nil && omax.Cmp(nmax) <= 0
}

func (c *comparer) object(o, n *Schema, at site) {
	if o.AdditionalProperties != nil && n.AdditionalProperties != nil {
		c.schema(o.AdditionalProperties, n.AdditionalProperties, site{pos: at.pos, what: "the values of " + at.what})
		if n.PropertyNames != nil && (o.PropertyNames == nil || o.PropertyNames.Pattern != n.PropertyNames.Pattern) &&
			!(o.PropertyNames != nil && o.PropertyNames.Pattern == "^[0-9]+$" && n.PropertyNames.Pattern == "^-?[0-9]+$") {
			c.add(at.pos, "the keys of %s changed to integers: records already on stream %s may hold keys that are not, which the new type cannot decode", at.what, c.stream)
		}
		return
	}
	byField := map[string]string{}
	for name, p := range n.Properties {
		if p.GoField != "" {
			byField[p.GoField] = name
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.Properties)) {
		op, np := o.Properties[name], n.Properties[name]
		if np == nil {
			if renamed, ok := byField[op.GoField]; ok && o.Properties[renamed] == nil {
				c.add(n.Properties[renamed].pos, "field %s of %s: JSON name changed from %q to %q; records already on stream %s carry %q, which the new type no longer decodes", op.GoField, at.what, name, renamed, c.stream, name)
			} else {
				c.add(at.pos, "JSON field %q (Go field %s) was removed from %s; records already on stream %s carry it, and the new type no longer decodes it", name, op.GoField, at.what, c.stream)
			}
			continue
		}
		what := fmt.Sprintf("field %s of %s (JSON %q)", np.GoField, at.what, name)
		c.schema(op, np, site{pos: cmp.Or(np.pos, at.pos), what: what})
		if slices.Contains(n.Required, name) && !slices.Contains(o.Required, name) {
			c.add(cmp.Or(np.pos, at.pos), "%s became required (omitempty or omitzero dropped): records already on stream %s may lack it, so they no longer match the message's schema", what, c.stream)
		}
	}
	// A new field encoding/json always writes is required by the new
	// schema, which the records already on the stream do not have.
	oldByField := map[string]string{}
	for name, p := range o.Properties {
		oldByField[p.GoField] = name
	}
	for _, name := range n.Required {
		np := n.Properties[name]
		if o.Properties[name] != nil || np == nil {
			continue // not new
		}
		if was, ok := oldByField[np.GoField]; ok && n.Properties[was] == nil {
			continue // reported as renamed
		}
		c.add(cmp.Or(np.pos, at.pos), "field %s of %s (JSON %q) is new and required (no omitempty or omitzero): records already on stream %s lack it, so they no longer match the message's schema; make it optional with omitempty or omitzero", np.GoField, at.what, name, c.stream)
	}
}

// headers compares the header contract of message name.
func (c *comparer) headers(name string, o, n *Schema, m *Message) {
	if o == nil {
		return
	}
	pos := m.Marker.Pos
	contract := cmp.Or(o.GoType, "of the lock")
	if m.Headers == nil {
		if p, ok := m.Marker.KeyPos["headers"]; ok {
			pos = p
		}
		for _, header := range slices.Sorted(maps.Keys(o.Properties)) {
			if op := o.Properties[header]; op.PartitionKey {
				c.add(pos, "message %s lost its header contract %s, and with it the partition-key field %s: publishers no longer key records by it, so the order of a key's records is lost", name, contract, op.GoField)
			} else {
				c.add(pos, "message %s lost its header contract %s: records already on stream %s carry header %q (field %s), which no handler of it decodes any more", name, contract, c.stream, header, op.GoField)
			}
		}
		return
	}
	contract = m.Headers.Name
	pos = c.cur.pkg.Fset.Position(m.Headers.Type.Obj().Pos())
	byField := map[string]string{}
	for header, p := range n.Properties {
		byField[p.GoField] = header
	}
	for _, header := range slices.Sorted(maps.Keys(o.Properties)) {
		op, np := o.Properties[header], n.Properties[header]
		if np != nil {
			if at := cmp.Or(np.pos, pos); describeHeader(op) != describeHeader(np) && !headerFits(op, np) {
				c.add(at, "header %q of %s changed from %s to %s: records already on stream %s carry values the new type cannot decode", header, contract, describeHeader(op), describeHeader(np), c.stream)
			}
			continue
		}
		renamed, ok := byField[op.GoField]
		switch {
		case op.PartitionKey && ok:
			c.add(n.Properties[renamed].pos, "header contract %s of message %s renamed its partition-key field %s to header %q: publishers no longer key records by it, so the order of a key's records is lost", contract, name, op.GoField, renamed)
		case op.PartitionKey:
			c.add(pos, "header contract %s of message %s lost its partition-key field %s: publishers no longer key records by it, so the order of a key's records is lost", contract, name, op.GoField)
		case ok:
			c.add(n.Properties[renamed].pos, "header field %s of %s renamed from %q to %q; records already on stream %s carry %q, which the new contract no longer decodes", op.GoField, contract, header, renamed, c.stream, header)
		default:
			c.add(pos, "header %q (field %s) was removed from the header contract of message %s; records already on stream %s carry it", header, op.GoField, name, c.stream)
		}
	}
}

func describeHeader(s *Schema) string {
	if s.GoType != "" {
		return s.GoType
	}
	return "string"
}

// headerFits reports whether the generated decoder of n parses every value
// the encoder of o writes.
func headerFits(o, n *Schema) bool {
	ok, nk := describeHeader(o), describeHeader(n)
	r := func(k string) (*Schema, bool) {
		for kind, rg := range intRanges {
			if types.Typ[kind].Name() == k {
				return &Schema{Minimum: json.Number(rg[0]), Maximum: json.Number(rg[1])}, true
			}
		}
		return nil, false
	}
	switch {
	case nk == "string":
		return true
	case ok == nk:
		return true
	}
	or, oInt := r(ok)
	nr, nInt := r(nk)
	return oInt && nInt && within(or, nr)
}

func sortDiags(ds []annotations.Diagnostic) []annotations.Diagnostic {
	slices.SortFunc(ds, func(a, b annotations.Diagnostic) int {
		return cmp.Or(cmp.Compare(a.Pos.Filename, b.Pos.Filename), cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column), cmp.Compare(a.Msg, b.Msg))
	})
	return slices.Compact(ds)
}
