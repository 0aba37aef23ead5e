package annotations

import (
	"reflect"
	"strconv"
)

// Arg is one key a marker was given, with its value: true for flags, int64
// for whole numbers (create_if_missing=2, retries=0), the canonical text for
// everything else (create_if_missing=on_demand, poll=500ms).
type Arg struct {
	Key   string
	Value any
}

// Args lists the keys of m that are set, in declaration order, so that
// tools describing a marker (the AsyncAPI document's x-kinesis extension)
// carry every key, including ones added later, without a list of their own.
func Args(m Marker) []Arg {
	var spec *markerSpec
	switch m.(type) {
	case *Message:
		spec = messageSpec
	case *Subscriber:
		spec = subscriberSpec
	default:
		return nil
	}
	v := reflect.ValueOf(m).Elem()
	var out []Arg
	for _, f := range spec.fields {
		fv := v.Field(f.index)
		if fv.IsZero() {
			continue
		}
		var value any = true
		if !f.flag {
			text := f.format(fv)
			value = text
			if n, err := strconv.ParseInt(text, 10, 64); err == nil && fv.Type() != durationType {
				value = n
			}
		}
		out = append(out, Arg{Key: f.key, Value: value})
	}
	return out
}
