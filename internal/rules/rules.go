// Package rules holds the service's rules for partition keys, the
// framework's rules for header names and encoding/json's for field names,
// in one place, so that the generator, the runtime and the in-process
// Kinesis (runtime/kinesistest) apply the same ones.
package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxPartitionKey is the service's limit on a partition key, in UTF-16 code
// units. The API reference gives "Minimum length of 1. Maximum length of
// 256" (characters), and the service validates it as a Java string's
// length, in UTF-16 units, as kinesalite does in JavaScript: a character
// outside the Basic Multilingual Plane (most emoji) counts two. The SDKs
// check only that a key is present, so nothing else stops a longer key
// before the call.
const MaxPartitionKey = 256

// ErrEmptyKey is the error of an empty partition key.
var ErrEmptyKey = errors.New("empty partition key")

// PartitionKey reports why key is not a partition key the service stores as
// it is: it must be valid UTF-8 (the request is JSON, which cannot carry
// other bytes: they would arrive as U+FFFD, under another key) and 1 to 256
// UTF-16 code units long. The error names the key's length and a short
// prefix, never the whole key.
func PartitionKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	units := 0
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			units++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("partition key %s (%d bytes) is not valid UTF-8 at byte %d", KeyPrefix(key), len(key), i)
		}
		units += utf16Len(r)
		i += size
	}
	if units > MaxPartitionKey {
		return fmt.Errorf("partition key %s is %d UTF-16 units long (%d characters, %d bytes); the service allows at most %d",
			KeyPrefix(key), units, utf8.RuneCountInString(key), len(key), MaxPartitionKey)
	}
	return nil
}

// KeyUnits is the length of key as the service counts it, in UTF-16 code
// units (an invalid byte counts one, as its replacement character would).
func KeyUnits(key string) int {
	n := 0
	for _, r := range key {
		n += utf16Len(r)
	}
	return n
}

func utf16Len(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// prefixRunes is how much of a key an error quotes.
const prefixRunes = 16

// KeyPrefix quotes the start of key for an error message: at most 16
// characters, with "..." when the key is longer.
func KeyPrefix(key string) string {
	i, n := 0, 0
	for i < len(key) && n < prefixRunes {
		_, size := utf8.DecodeRuneInString(key[i:])
		i += size
		n++
	}
	if i == len(key) {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:i]) + "..."
}

// MaxHeaderName is the longest header name.
const MaxHeaderName = 128

// ValidHeaderName reports whether s can name a header: 1 to 128 characters
// of letters, digits, '-', '_' and '.'.
func ValidHeaderName(s string) bool {
	if len(s) < 1 || len(s) > MaxHeaderName {
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

// HeaderNameRule is the rule of ValidHeaderName, for error messages.
const HeaderNameRule = "a header name is 1 to 128 characters of letters, digits, '-', '_' and '.'"

// ReservedHeaderPrefix starts the names of the headers the runtime writes
// itself (a retry copy's attempt count, a dead letter's reason and origin):
// a publisher that set one would change how its record is read, such as
// the attempt a subscriber counts its retries from.
const ReservedHeaderPrefix = "kinesisgen-"

// ReservedHeader reports whether name is the runtime's own (its prefix, in
// any case).
func ReservedHeader(name string) bool {
	return len(name) >= len(ReservedHeaderPrefix) && strings.EqualFold(name[:len(ReservedHeaderPrefix)], ReservedHeaderPrefix)
}

// Header reports why a header cannot be published: a name outside
// ValidHeaderName or one of the runtime's own (ReservedHeader), or a value
// that is not valid UTF-8 (header values are text; a delivery hands them
// over as strings).
func Header(name, value string) error {
	if !ValidHeaderName(name) {
		return fmt.Errorf("header name %s: %s", KeyPrefix(name), HeaderNameRule)
	}
	if ReservedHeader(name) {
		return fmt.Errorf("header name %s: names starting with %s are the runtime's own", name, ReservedHeaderPrefix)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("header %s: value %s is not valid UTF-8", name, KeyPrefix(value))
	}
	return nil
}
