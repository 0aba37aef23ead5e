package contract

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// toYAML rewrites a JSON document as block-style YAML with the same keys in
// the same order. Strings are double-quoted (JSON's escapes are YAML's),
// multi-line ones written as literal blocks; keys stay plain when YAML
// cannot read them as anything but that string.
func toYAML(src []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	v, err := readJSON(dec)
	if err != nil {
		panic("contract: toYAML on invalid JSON: " + err.Error()) // only called on our own output
	}
	var b bytes.Buffer
	writeYAML(&b, v, 0)
	return b.Bytes()
}

// readJSON reads one value with object keys in order: node, []any,
// string, json.Number, bool or nil.
func readJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		n := node{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := readJSON(dec)
			if err != nil {
				return nil, err
			}
			n.set(k.(string), v)
		}
		_, err := dec.Token()
		return n, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := readJSON(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

func writeYAML(b *bytes.Buffer, v any, indent int) {
	pad := strings.Repeat(" ", indent)
	switch v := v.(type) {
	case node:
		for _, e := range v {
			b.WriteString(pad + yamlKey(e.k) + ":")
			writeValue(b, e.v, indent)
		}
	case []any:
		for _, e := range v {
			b.WriteString(pad + "-")
			switch e := e.(type) {
			case node:
				if len(e) == 0 {
					b.WriteString(" {}\n")
					continue
				}
				// The first key on the dash's line, the rest aligned under it.
				var first bytes.Buffer
				writeYAML(&first, e, indent+2)
				b.WriteString(" " + strings.TrimPrefix(first.String(), pad+"  "))
			default:
				writeValue(b, e, indent)
			}
		}
	}
}

// writeValue writes what follows "key:" or "-".
func writeValue(b *bytes.Buffer, v any, indent int) {
	switch v := v.(type) {
	case node:
		if len(v) == 0 {
			b.WriteString(" {}\n")
			return
		}
		b.WriteString("\n")
		writeYAML(b, v, indent+2)
	case []any:
		if len(v) == 0 {
			b.WriteString(" []\n")
			return
		}
		b.WriteString("\n")
		writeYAML(b, v, indent+2)
	case string:
		if block, ok := literalBlock(v, indent+2); ok {
			b.WriteString(" " + block)
			return
		}
		b.WriteString(" " + quote(v) + "\n")
	case json.Number:
		b.WriteString(" " + v.String() + "\n")
	case bool:
		if v {
			b.WriteString(" true\n")
		} else {
			b.WriteString(" false\n")
		}
	case nil:
		b.WriteString(" null\n")
	}
}

func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// literalBlock writes a multi-line string as a "|-" block when its lines
// survive one unchanged: printable, no trailing blanks, no leading blank
// on the first line, no trailing newline.
func literalBlock(s string, indent int) (string, bool) {
	if !strings.Contains(s, "\n") || strings.HasSuffix(s, "\n") || strings.HasPrefix(s, " ") {
		return "", false
	}
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	b.WriteString("|-\n")
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimRight(line, " \t") != line || strings.ContainsFunc(line, func(r rune) bool {
			return r < ' ' || r == 0x7f || r == 0xfeff || r == 0x85 || r == 0x2028 || r == 0x2029
		}) {
			return "", false
		}
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(pad + line + "\n")
	}
	return b.String(), true
}

var plainKey = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_.$-]*$`)

// yamlKey leaves a key plain unless YAML 1.1 or 1.2 could read it as
// something else (true, no, null, ...).
func yamlKey(k string) string {
	switch strings.ToLower(k) {
	case "y", "n", "yes", "no", "true", "false", "on", "off", "null":
		return quote(k)
	}
	if plainKey.MatchString(k) {
		return k
	}
	return quote(k)
}
