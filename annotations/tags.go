package annotations

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// TagKey is the struct-tag key of a header contract field:
//
//	Customer string `kinesis:"partition-key"`
//
// A struct with such fields is a header contract: kinesisgen writes its
// EncodeHeaders and DecodeHeaders methods. Tagged fields are strings, integer
// kinds, bools (or named types of them) and time.Time (RFC 3339 text); a zero
// value is left out when encoding and a missing header decodes as the zero
// value. The tagged fields of an embedded struct, by value or by pointer, are
// headers of the embedding contract too: a nil pointer embed sends none of
// its headers (its partition-key field's is written empty), and decoding
// allocates it when one of its headers came. Header names are 1 to 128 characters of letters, digits, '-', '_'
// and '.', not starting with "kinesisgen-" (the runtime's own headers);
// "partition-key" is the record's partition key. Its field is a string or
// integer kind (not a bool or time.Time) and is always written: its zero
// value (the empty string, 0) is no key, which is an error at publish, not
// the key "0" nor a fall to a process-unique key.
const TagKey = "kinesis"

// HeaderTag parses a struct field's tag. ok is false when the field has no
// kinesis tag; err describes a tag that is malformed.
func HeaderTag(tag string) (name string, ok bool, err error) {
	value, ok := reflect.StructTag(tag).Lookup(TagKey)
	if !ok {
		return "", false, nil
	}
	name, opts, hasOpts := strings.Cut(value, ",")
	if hasOpts {
		return "", true, fmt.Errorf("kinesis tag %q: header tags take no options (%q)", value, opts)
	}
	if !ValidHeaderName(name) {
		return "", true, fmt.Errorf("kinesis tag %q: %s", value, rules.HeaderNameRule)
	}
	if rules.ReservedHeader(name) {
		return "", true, fmt.Errorf("kinesis tag %q: header names starting with %s are the runtime's own", value, rules.ReservedHeaderPrefix)
	}
	return name, true, nil
}

// ValidHeaderName reports whether s can name a header: 1 to 128 characters
// of letters, digits, '-', '_' and '.'. The runtime checks the headers of a
// publish with the same rule.
func ValidHeaderName(s string) bool { return rules.ValidHeaderName(s) }
