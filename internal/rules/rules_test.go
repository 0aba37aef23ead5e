package rules

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestPartitionKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want string // a fragment of the error; "" for a valid key
	}{
		{"one character", "k", ""},
		{"256 ASCII", strings.Repeat("k", 256), ""},
		{"257 ASCII", strings.Repeat("k", 257), "257 UTF-16 units long (257 characters, 257 bytes)"},
		{"256 two-byte", strings.Repeat("é", 256), ""},
		{"256 three-byte", strings.Repeat("中", 256), ""},
		{"128 astral", strings.Repeat("😀", 128), ""},
		{"129 astral", strings.Repeat("😀", 129), "258 UTF-16 units long (129 characters, 516 bytes)"},
		{"empty", "", "empty partition key"},
		{"invalid byte", "ab\xffcd", `partition key "ab\xffcd" (5 bytes) is not valid UTF-8 at byte 2`},
		{"truncated sequence", "ab\xe4\xb8", "not valid UTF-8 at byte 2"},
		{"encoded surrogate", "\xed\xa0\x80", "not valid UTF-8 at byte 0"},
	}
	for _, tt := range tests {
		err := PartitionKey(tt.key)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
		if len(tt.key) > 40 && strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s: the error quotes the whole key", tt.name)
		}
	}
	if !errors.Is(PartitionKey(""), ErrEmptyKey) {
		t.Error("an empty key does not match ErrEmptyKey")
	}
}

func TestKeyPrefix(t *testing.T) {
	for key, want := range map[string]string{
		"short":                          `"short"`,
		strings.Repeat("k", 16):          `"kkkkkkkkkkkkkkkk"`,
		strings.Repeat("k", 17):          `"kkkkkkkkkkkkkkkk"...`,
		strings.Repeat("😀", 20):          `"` + strings.Repeat("😀", 16) + `"...`,
		"\xff" + strings.Repeat("k", 20): `"\xffkkkkkkkkkkkkkkk"...`,
	} {
		if got := KeyPrefix(key); got != want {
			t.Errorf("KeyPrefix(%q) = %s, want %s", key, got, want)
		}
	}
}

func TestHeader(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		ok          bool
	}{
		{"trace-id", "t", true},
		{"a.b_c-D9", "", true},
		{"", "v", false},
		{"sp ace", "v", false},
		{strings.Repeat("h", 128), "v", true},
		{strings.Repeat("h", 129), "v", false},
		{"trace", "\xff", false},
		{"kinesisgen-attempt", "1", false}, // the runtime's own
		{"KinesisGen-Reason", "r", false},
		{"kinesisgen", "v", true},
		{"my-kinesisgen-x", "v", true},
	} {
		if err := Header(tt.name, tt.value); (err == nil) != tt.ok {
			t.Errorf("Header(%q, %q) = %v, want ok %v", tt.name, tt.value, err, tt.ok)
		}
	}
}

// JSONTagName agrees with encoding/json on which tag names it writes a
// field under: a field tagged with any other keeps its Go name.
func TestJSONTagNameIsEncodingJSONs(t *testing.T) {
	for _, name := range []string{"id", "a-b", "x.y", "ä", "a b", "1", "$", "", "a\"b", "a\\b", "a'b", "a`b", "\u00a0", "αβ", "a\tb"} {
		tag := reflect.StructTag(`json:"` + strings.ReplaceAll(strings.ReplaceAll(name, `\`, `\\`), `"`, `\"`) + `"`)
		typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[int](), Tag: tag}})
		out, err := json.Marshal(reflect.New(typ).Elem().Interface())
		if err != nil {
			t.Fatal(err)
		}
		usesTag := !strings.HasPrefix(string(out), `{"F":`) || name == "F"
		if got := JSONTagName(name); got != usesTag {
			t.Errorf("JSONTagName(%q) = %v; encoding/json writes %s", name, got, out)
		}
	}
}
