// Package annotations is the grammar of kinesisgen's source annotations: the
// //kinesis: markers and the `kinesis:"HEADER"` struct tag, parsed into typed
// values with positions, and their diagnostics.
//
// A marker is a directive comment, with no space after the slashes, in the
// doc comment of a declaration:
//
//	//kinesis:NAME key=value key="quoted value" flag
//
// In the doc comment of a declaration, a line that reads like a marker with a
// space after the slashes ("// kinesis:message ...") is reported as an error
// rather than ignored: the spaced form is almost always a marker typed wrong,
// and ignoring it would silently drop a handler. Reword a prose line that
// happens to start with "kinesis:". A well-formed marker anywhere but a doc
// comment (detached by a blank line, inside a function body) is an error too.
package annotations

import (
	"fmt"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// Prefix starts every marker.
const Prefix = "//kinesis:"

// MinPoll is the shortest poll= the runtime accepts (runtime.MinPollInterval).
const MinPoll = 200 * time.Millisecond

// Diagnostic is one problem with a marker or tag, at its position.
type Diagnostic struct {
	Pos token.Position
	Msg string
}

// String is "file:line:col: message" ("file: message" without a line).
func (d Diagnostic) String() string {
	if d.Pos.Line == 0 {
		return d.Pos.Filename + ": " + d.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.Pos.Filename, d.Pos.Line, d.Pos.Column, d.Msg)
}

// Marker is a parsed marker: *Message or *Subscriber.
type Marker interface {
	// MarkerName is the name after the prefix: "message" or "subscriber".
	MarkerName() string
	// Position is where the marker starts.
	Position() token.Position
	// String prints the marker in its canonical form; parsing it gives the same value.
	String() string
}

func (m *Message) MarkerName() string          { return "message" }
func (m *Message) Position() token.Position    { return m.Pos }
func (m *Message) String() string              { return render(messageSpec, reflect.ValueOf(m).Elem()) }
func (s *Subscriber) MarkerName() string       { return "subscriber" }
func (s *Subscriber) Position() token.Position { return s.Pos }
func (s *Subscriber) String() string           { return render(subscriberSpec, reflect.ValueOf(s).Elem()) }

// IsMarker reports whether a raw comment ("//..." as in ast.Comment.Text) is
// written as a marker, well-formed or not.
func IsMarker(text string) bool { return strings.HasPrefix(text, Prefix) }

// IsSpacedMarker reports whether a raw comment reads like a marker with
// whitespace after the slashes, as in "// kinesis:message".
func IsSpacedMarker(text string) bool {
	rest, ok := strings.CutPrefix(text, "//")
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
		return false
	}
	rest = strings.TrimLeft(rest, " \t")
	name, ok := strings.CutPrefix(rest, "kinesis:")
	return ok && name != "" && 'a' <= name[0] && name[0] <= 'z'
}

// ParseComment parses one raw comment at pos. It returns nil and no
// diagnostics for a comment that is not a marker; a spaced marker
// (IsSpacedMarker) is a diagnostic.
func ParseComment(pos token.Position, text string) (Marker, []Diagnostic) {
	if IsSpacedMarker(text) {
		name, _, _ := strings.Cut(strings.TrimLeft(text[2:], " \t")[len("kinesis:"):], " ")
		return nil, []Diagnostic{{pos, fmt.Sprintf("marker written with a space after //: write //kinesis:%s (a marker is a directive comment), or reword the comment", name)}}
	}
	if !IsMarker(text) {
		return nil, nil
	}
	p := &lineParser{pos: pos, src: text, off: len(Prefix)}
	name := p.word()
	if name == "" {
		p.errorf(0, "missing marker name after %s; want %s", Prefix, strings.Join(markerNames(), " or "))
		return nil, p.diags
	}
	var spec *markerSpec
	for _, s := range specs {
		if s.name == name {
			spec = s
		}
	}
	if spec == nil {
		p.errorf(0, "unknown marker %s%s%s", Prefix, name, didYouMean(name, markerNames(), Prefix))
		return nil, p.diags
	}
	v := reflect.New(spec.typ)
	m := v.Interface().(Marker)
	p.parseArgs(spec, v.Elem())
	return m, p.diags
}

// lineParser reads one marker comment. Offsets are byte offsets into src.
type lineParser struct {
	pos   token.Position
	src   string
	off   int
	diags []Diagnostic
}

func (p *lineParser) at(off int) token.Position {
	q := p.pos
	q.Offset += off
	q.Column += off
	return q
}

func (p *lineParser) errorf(off int, format string, args ...any) {
	p.diags = append(p.diags, Diagnostic{p.at(off), fmt.Sprintf(format, args...)})
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// word reads up to the next blank.
func (p *lineParser) word() string {
	start := p.off
	for p.off < len(p.src) && !isSpace(p.src[p.off]) {
		p.off++
	}
	return p.src[start:p.off]
}

func (p *lineParser) skipSpace() {
	for p.off < len(p.src) && isSpace(p.src[p.off]) {
		p.off++
	}
}

// parseArgs reads key=value and flag arguments into v, then checks that the
// required keys are there and the keys agree with each other.
func (p *lineParser) parseArgs(spec *markerSpec, v reflect.Value) {
	v.FieldByName("Pos").Set(reflect.ValueOf(p.pos))
	keyPos := map[string]token.Position{}
	v.FieldByName("KeyPos").Set(reflect.ValueOf(keyPos))
	for {
		p.skipSpace()
		if p.off >= len(p.src) {
			break
		}
		keyOff := p.off
		for p.off < len(p.src) && !isSpace(p.src[p.off]) && p.src[p.off] != '=' {
			p.off++
		}
		key := p.src[keyOff:p.off]
		hasValue := p.off < len(p.src) && p.src[p.off] == '='
		var value string
		valueOK := true
		if hasValue {
			p.off++
			value, valueOK = p.value(key, keyOff)
		}
		if key == "" {
			p.errorf(keyOff, "missing key before =")
			continue
		}
		f := spec.byKey[key]
		if f == nil {
			if other := markerOf(key); other != nil {
				p.errorf(keyOff, "%s is a key of %s%s (%s), not of %s%s", key, Prefix, other.name, other.place, Prefix, spec.name)
				continue
			}
			p.errorf(keyOff, "unknown key %s for %s%s%s", key, Prefix, spec.name, didYouMean(key, spec.keys(), ""))
			continue
		}
		if _, dup := keyPos[key]; dup {
			p.errorf(keyOff, "%s given twice", key)
			continue
		}
		keyPos[key] = p.at(keyOff)
		switch {
		case f.flag && hasValue:
			p.errorf(keyOff, "%s is a flag and takes no value", key)
		case !f.flag && !hasValue:
			p.errorf(keyOff, "%s needs a value: %s=%s", key, key, f.meta)
		case !valueOK:
			// reported by value
		case f.flag:
			v.Field(f.index).SetBool(true)
		default:
			if msg := f.set(v.Field(f.index), value); msg != "" {
				p.errorf(keyOff, "%s=%s: %s", key, diagValue(value), msg)
			}
		}
	}
	for _, f := range spec.fields {
		if _, ok := keyPos[f.key]; f.required && !ok {
			p.errorf(0, "%s%s needs %s=%s", Prefix, spec.name, f.key, f.meta)
		}
	}
	if spec.check != nil {
		p.diags = append(p.diags, spec.check(v.Addr().Interface(), keyPos)...)
	}
}

// value reads a bare word or a Go-quoted string after "key=".
func (p *lineParser) value(key string, keyOff int) (string, bool) {
	if p.off >= len(p.src) || isSpace(p.src[p.off]) {
		p.errorf(keyOff, "%s= has no value", key)
		return "", false
	}
	if c := p.src[p.off]; c != '"' && c != '`' {
		return p.word(), true
	}
	quoted, err := strconv.QuotedPrefix(p.src[p.off:])
	if err != nil {
		p.errorf(keyOff, "%s: unterminated or malformed quoted value", key)
		p.off = len(p.src)
		return "", false
	}
	p.off += len(quoted)
	if p.off < len(p.src) && !isSpace(p.src[p.off]) {
		p.errorf(keyOff, "%s: want a blank after the quoted value", key)
		p.word()
		return "", false
	}
	s, _ := strconv.Unquote(quoted) // QuotedPrefix accepted it
	return s, true
}

// printValue renders a value as a bare word when it reads back as the same
// word, else Go-quoted.
// diagValue is a value as a diagnostic quotes it: in full when short, else
// its first characters, so a 300-character key does not fill the line.
func diagValue(s string) string {
	if len(s) <= 40 {
		return printValue(s)
	}
	return rules.KeyPrefix(s)
}

func printValue(s string) string {
	if s == "" || s[0] == '"' || s[0] == '`' || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r == ' ' || r == '\t' || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// render renders v in canonical form: keys in declaration order, zero
// optional values left out.
func render(spec *markerSpec, v reflect.Value) string {
	var b strings.Builder
	b.WriteString(Prefix + spec.name)
	for _, f := range spec.fields {
		fv := v.Field(f.index)
		if fv.IsZero() && !f.required {
			continue
		}
		b.WriteByte(' ')
		b.WriteString(f.key)
		if f.flag {
			continue
		}
		b.WriteByte('=')
		b.WriteString(printValue(f.format(fv)))
	}
	return b.String()
}

// markerSpec is what reflection learns from a marker type's field tags.
type markerSpec struct {
	name   string
	place  string // what the marker goes on, for diagnostics
	typ    reflect.Type
	fields []*fieldSpec
	byKey  map[string]*fieldSpec
	// check runs after the keys parsed, for rules between keys.
	check func(m any, keyPos map[string]token.Position) []Diagnostic
}

func (s *markerSpec) keys() []string {
	var ks []string
	for _, f := range s.fields {
		ks = append(ks, f.key)
	}
	return ks
}

type fieldSpec struct {
	index          int
	name           string // Go field name
	key, meta      string
	required, flag bool
	min, max       int64
}

var (
	messageSpec    = newSpec("message", "on the message's struct type", Message{}, nil)
	subscriberSpec = newSpec("subscriber", "on the handler", Subscriber{}, checkSubscriber)
	specs          = []*markerSpec{messageSpec, subscriberSpec}
)

// markerOf returns the marker that has key, nil if none or both have it;
// it names the right marker for a key written on the wrong one.
func markerOf(key string) *markerSpec {
	var found *markerSpec
	for _, s := range specs {
		if s.byKey[key] != nil {
			if found != nil {
				return nil
			}
			found = s
		}
	}
	return found
}

func markerNames() []string {
	var ns []string
	for _, s := range specs {
		ns = append(ns, s.name)
	}
	return ns
}

func newSpec(name, place string, zero any, check func(any, map[string]token.Position) []Diagnostic) *markerSpec {
	t := reflect.TypeOf(zero)
	s := &markerSpec{name: name, place: place, typ: t, byKey: map[string]*fieldSpec{}, check: check}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("marker")
		if !ok {
			continue
		}
		parts := strings.Split(tag, ",")
		f := &fieldSpec{index: i, name: sf.Name, key: parts[0], meta: sf.Tag.Get("meta"), min: 0, max: 1<<31 - 1}
		f.required = slices.Contains(parts[1:], "required")
		f.flag = slices.Contains(parts[1:], "flag")
		if m := sf.Tag.Get("min"); m != "" {
			f.min, _ = strconv.ParseInt(m, 10, 64)
		}
		if m := sf.Tag.Get("max"); m != "" {
			f.max, _ = strconv.ParseInt(m, 10, 64)
		}
		s.fields = append(s.fields, f)
		s.byKey[f.key] = f
	}
	return s
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	startAtType  = reflect.TypeFor[StartAt]()
	createType   = reflect.TypeFor[CreateIfMissing]()
)

// set parses value into fv; it returns a message when the value is bad.
func (f *fieldSpec) set(fv reflect.Value, value string) string {
	switch {
	case fv.Type() == durationType:
		d, err := time.ParseDuration(value)
		if err != nil {
			return "not a duration; write for example 500ms or 2s"
		}
		if f.key == "visibility" {
			if d < time.Second || d > 12*time.Hour || d%time.Second != 0 {
				return "must be whole seconds, 1s to 12h"
			}
		} else if d < MinPoll {
			return "must be at least " + MinPoll.String() + " (five reads per shard per second)"
		}
		fv.SetInt(int64(d))
	case fv.Type() == startAtType:
		s, ok := ParseStartAt(value)
		if !ok {
			return "want horizon, latest or an RFC 3339 time such as 2026-01-02T15:04:05Z"
		}
		fv.Set(reflect.ValueOf(s))
	case fv.Type() == createType:
		if value == OnDemand {
			fv.Set(reflect.ValueOf(CreateIfMissing{OnDemand: true}))
			return ""
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return "want a shard count or " + OnDemand
		}
		if n < f.min || n > f.max {
			return fmt.Sprintf("must be %d to %d shards, or %s", f.min, f.max, OnDemand)
		}
		fv.Set(reflect.ValueOf(CreateIfMissing{Shards: int32(n)}))
	case fv.Kind() == reflect.String:
		if msg := checkString(f.key, value); msg != "" {
			return msg
		}
		fv.SetString(value)
	case fv.Kind() == reflect.Int || fv.Kind() == reflect.Int32 || fv.Kind() == reflect.Pointer:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return "not a whole number"
		}
		if n < f.min || n > f.max {
			return fmt.Sprintf("must be %d to %d", f.min, f.max)
		}
		if fv.Kind() == reflect.Pointer {
			fv.Set(reflect.New(fv.Type().Elem()))
			fv = fv.Elem()
		}
		fv.SetInt(n)
	default:
		panic("annotations: unhandled field type " + fv.Type().String())
	}
	return ""
}

// format is the inverse of set.
func (f *fieldSpec) format(fv reflect.Value) string {
	switch {
	case fv.Type() == durationType:
		return time.Duration(fv.Int()).String()
	case fv.Type() == startAtType:
		return fv.Interface().(StartAt).String()
	case fv.Type() == createType:
		return fv.Interface().(CreateIfMissing).String()
	case fv.Kind() == reflect.String:
		return fv.String()
	case fv.Kind() == reflect.Pointer:
		return strconv.FormatInt(fv.Elem().Int(), 10)
	default:
		return strconv.FormatInt(fv.Int(), 10)
	}
}

// checkString validates the string-valued keys.
func checkString(key, value string) string {
	switch key {
	case "stream", "dead_letter":
		if rules.IsARN(value) {
			// Another account's stream, by its ARN.
			if _, err := rules.ParseStreamARN(value); err != nil {
				return err.Error()
			}
			return ""
		}
		if !ValidStreamName(value) {
			return "a stream name is 1 to 128 characters of letters, digits, '_', '-' and '.'"
		}
	case "fanout":
		if !ValidStreamName(value) {
			return "a stream consumer name is 1 to 128 characters of letters, digits, '_', '-' and '.'"
		}
	case "retry":
		if value != RetryTip && value != RetryInPlace {
			return "want " + RetryTip + " (a copy at the stream's tip, the default) or " + RetryInPlace + " (back off in the lane, keeping the key's order)"
		}
	case "queue":
		if !ValidStreamName(value) && !queueARN.MatchString(value) {
			return "a queue is named by 1 to 128 characters of letters, digits, '_', '-' and '.', or by its ARN (arn:aws:kinesis:REGION:ACCOUNT:queue/ID)"
		}
	case "partition_key":
		if err := rules.PartitionKey(value); err != nil {
			return err.Error()
		}
	case "headers":
		if !token.IsIdentifier(value) {
			return "want the name of a struct type in this package"
		}
	}
	return ""
}

// queueARN is the form of a queue ARN.
var queueARN = regexp.MustCompile(`^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:queue/\S+$`)

// ValidStreamName reports whether s is a Kinesis stream name.
func ValidStreamName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// The values of retry=.
const (
	RetryTip     = "tip"
	RetryInPlace = "in_place"
)

// ParseStartAt parses a start_at value.
func ParseStartAt(s string) (StartAt, bool) {
	switch s {
	case "horizon":
		return StartAt{Kind: StartHorizon}, true
	case "latest":
		return StartAt{Kind: StartLatest}, true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return StartAt{}, false
	}
	return StartAt{Kind: StartAtTime, Time: t}, true
}

// String is the start_at value that parses back to s.
func (s StartAt) String() string {
	switch s.Kind {
	case StartHorizon:
		return "horizon"
	case StartLatest:
		return "latest"
	case StartAtTime:
		return s.Time.Format(time.RFC3339Nano)
	}
	return ""
}

// Equal reports whether s and o name the same position (times compared as instants).
func (s StartAt) Equal(o StartAt) bool { return s.Kind == o.Kind && s.Time.Equal(o.Time) }

func checkSubscriber(m any, keyPos map[string]token.Position) []Diagnostic {
	s := m.(*Subscriber)
	var ds []Diagnostic
	if pos, ok := keyPos["by_key"]; ok {
		if _, ok := keyPos["workers"]; !ok {
			ds = append(ds, Diagnostic{pos, "by_key needs workers=N (the number of lanes)"})
		}
	}
	if pos, ok := keyPos["max_record_size"]; ok && !s.CreateIfMissing.Set() {
		ds = append(ds, Diagnostic{pos, "max_record_size sets the record size of the streams create_if_missing creates; it needs create_if_missing"})
	}
	if pos, ok := keyPos["partition_key"]; ok && !s.Reply {
		ds = append(ds, Diagnostic{pos, "partition_key on a subscriber is the key of its replies; it needs reply"})
	}
	if _, ok := keyPos["fanout"]; ok {
		for _, key := range []string{"poll", "batch"} {
			if pos, ok := keyPos[key]; ok {
				ds = append(ds, Diagnostic{pos, key + " sets how GetRecords is polled; a fanout subscriber does not poll (Kinesis pushes its records): drop one of them"})
			}
		}
	}
	if _, ok := keyPos["queue"]; ok {
		for _, key := range []string{"by_key", "fanout", "poll", "batch"} {
			pos, ok := keyPos[key]
			if !ok {
				continue
			}
			switch key {
			case "by_key":
				ds = append(ds, Diagnostic{pos, "by_key keeps each key's messages in order, and a queue keeps no order: drop by_key, or read the stream by shards (drop queue)"})
			case "fanout":
				ds = append(ds, Diagnostic{pos, "fanout and queue are two ways to read a stream: a queue subscriber reads through the queue, not the shards: drop one of them"})
			default:
				ds = append(ds, Diagnostic{pos, key + " sets how GetRecords is polled; a queue subscriber long-polls the queue instead: drop one of them"})
			}
		}
		if pos, ok := keyPos["create_if_missing"]; ok && !s.CreateIfMissing.OnDemand {
			ds = append(ds, Diagnostic{pos, "queues need an on-demand stream: create_if_missing=on_demand"})
		}
	} else {
		for _, key := range []string{"visibility", "max_receives"} {
			if pos, ok := keyPos[key]; ok {
				ds = append(ds, Diagnostic{pos, key + " is a setting of a queue subscriber; it needs queue"})
			}
		}
	}
	if pos, ok := keyPos["dead_letter"]; ok && s.DeadLetter != "" && s.DeadLetter == s.Stream {
		ds = append(ds, Diagnostic{pos, "dead_letter must be another stream than the one read"})
	}
	return ds
}

// didYouMean returns "; did you mean PREFIXx?" for the candidate closest to
// name, when one is close enough to be a typo.
func didYouMean(name string, candidates []string, prefix string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestDist && d < len(c) {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return "; want one of " + prefix + strings.Join(candidates, ", "+prefix)
	}
	return "; did you mean " + prefix + best + "?"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
