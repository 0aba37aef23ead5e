package rules

import (
	"strings"
	"unicode"
)

// JSONTagName reports whether s, the name part of a field's json tag, is
// one encoding/json writes the field under (its isValidTag); a field
// whose tag name is not keeps its Go name. The contract generator's
// schemas and the runtime's compiled encoder name fields by it.
func JSONTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// Backslash and quote are reserved; other punctuation is allowed.
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
