package annotations

import (
	"fmt"
	"reflect"
	"strings"
)

// TagKey is the struct-tag key of a header contract field:
//
//	Customer string `kinesis:"partition-key"`
//
// A struct with such fields is a header contract: kinesisgen writes its
// EncodeHeaders and DecodeHeaders methods. Tagged fields are strings, integer
// kinds, bools (or named types of them) and time.Time (RFC 3339 text); a zero
// value is left out when encoding and a missing header decodes as the zero
// value. Header names are 1 to 128 characters of letters, digits, '-', '_'
// and '.'; "partition-key" is the record's partition key.
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
		return "", true, fmt.Errorf("kinesis tag %q: a header name is 1 to 128 characters of letters, digits, '-', '_' and '.'", value)
	}
	return name, true, nil
}

// ValidHeaderName reports whether s can name a header.
func ValidHeaderName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
