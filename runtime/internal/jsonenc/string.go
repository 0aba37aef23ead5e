package jsonenc

import (
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as json.Marshal escapes
// it (HTML characters included): control characters, the quote and the
// backslash; <, > and &; invalid UTF-8 as U+FFFD; U+2028 and U+2029.
//
// It tests eight bytes at a time for anything to escape, where
// encoding/json looks each byte up: message bodies are mostly runs of
// plain ASCII.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	raw := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	start := 0
	i := 0
	for i < len(s) {
		for i+8 <= len(s) && plain8(binary.LittleEndian.Uint64(raw[i:])) {
			i += 8
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if htmlSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain8 says whether the eight bytes of w need no escaping: none is
// below 0x20, at or above 0x80, or one of " \ < > &. Each test sets a
// byte's high bit where that byte matches (exactly when any byte does: the
// borrows that make the formulas inexact only follow a match).
func plain8(w uint64) bool {
	q, bs, lt, gt, amp := w^(ones*'"'), w^(ones*'\\'), w^(ones*'<'), w^(ones*'>'), w^(ones*'&')
	m := w | (w-ones*0x20)&^w |
		(q-ones)&^q | (bs-ones)&^bs | (lt-ones)&^lt | (gt-ones)&^gt | (amp-ones)&^amp
	return m&highs == 0
}

// htmlSafe is encoding/json's htmlSafeSet: the ASCII bytes written as they
// are.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		switch b {
		case '"', '\\', '<', '>', '&':
		default:
			t[b] = true
		}
	}
	return t
}()
