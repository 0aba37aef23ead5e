package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/kinesisgen/kinesisgen/runtime/internal/jsonenc"
)

// JSON is the default Codec: encoding/json, but for a null payload. A
// message's JSON is byte for byte json.Marshal's; for structs of named
// fields the runtime writes it through a per-type encoder compiled once
// (runtime/internal/jsonenc), about three times faster.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

// isJSON says whether c is the default codec, which an aggregator may run
// on its own goroutine: CPU only, no I/O of its own to hold the others'
// messages back (see aggregator.encode).
func isJSON(c Codec) bool {
	_, ok := c.(jsonCodec)
	return ok
}

func (jsonCodec) Marshal(v any) ([]byte, error) {
	if e := jsonenc.For(reflect.TypeOf(v)); e != nil {
		if b, ok := e.Marshal(v); ok {
			return b, nil
		}
	}
	return json.Marshal(v) // the types and values jsonenc leaves to it, errors among them
}

// Unmarshal is json.Unmarshal, except that a payload of null into a type
// that cannot be nil (a struct, a number, a string) is an error:
// encoding/json leaves the value as it was, so a handler would get a zero
// message for a record that holds none. Into a pointer, map, slice or
// interface, null is nil, as encoding/json makes it.
func (jsonCodec) Unmarshal(data []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Pointer && !nilable(t.Elem().Kind()) {
			return fmt.Errorf("json: null, and a %s cannot be nil", t.Elem())
		}
	}
	return json.Unmarshal(data, v)
}

func nilable(k reflect.Kind) bool {
	switch k {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return true
	}
	return false
}
