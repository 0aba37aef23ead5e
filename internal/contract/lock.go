package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/types"
	"strings"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// LockVersion is the format of kinesis.lock.json; a lock of another format
// is reported, not guessed at.
const LockVersion = 1

// Lock is a package's contract as kinesis.lock.json records it: what each
// message looks like on its stream, and what each subscriber reads. It
// holds no positions or doc comments, so it changes only with the contract.
type Lock struct {
	Version     int                          `json:"kinesisgen_lock"`
	Package     string                       `json:"package"`
	Messages    map[string]*LockedMessage    `json:"messages,omitempty"`
	Subscribers map[string]*LockedSubscriber `json:"subscribers,omitempty"`
	// Definitions are the named struct types the schemas refer to.
	Definitions map[string]*Schema `json:"definitions,omitempty"`

	pkg *Package // the code a derived lock came from
}

// LockedMessage is a //kinesis:message in the lock.
type LockedMessage struct {
	Stream  string  `json:"stream"`
	Payload *Schema `json:"payload"`
	Headers *Schema `json:"headers,omitempty"`
	// Aggregate: its records are KPL aggregates (the marker's aggregate).
	Aggregate bool `json:"aggregate,omitempty"`
}

// LockedSubscriber is a //kinesis:subscriber in the lock.
type LockedSubscriber struct {
	Stream  string  `json:"stream"`
	Message string  `json:"message"` // the Go type, as the package writes it
	Payload *Schema `json:"payload"`
	Reply   string  `json:"reply,omitempty"`
}

const lockRefPrefix = "#/definitions/"

// Derive returns the lock of p's code, or the diagnostics of types that
// encoding/json cannot encode.
func Derive(p *Package) (*Lock, []annotations.Diagnostic) {
	d := newDeriver(p.Fset, nil, p.Types, lockRefPrefix)
	l := &Lock{Version: LockVersion, Package: p.Path, Messages: map[string]*LockedMessage{}, Subscribers: map[string]*LockedSubscriber{}, pkg: p}
	for _, m := range p.Messages {
		lm := &LockedMessage{Stream: m.Marker.Stream, Payload: d.payload(m.Type), Aggregate: m.Marker.Aggregate}
		if m.Headers != nil {
			lm.Headers = d.headers(m.Headers)
		}
		l.Messages[m.Name] = lm
	}
	for _, s := range p.Subscribers {
		l.Subscribers[s.Name] = &LockedSubscriber{Stream: s.Marker.Stream, Message: d.typeName(s.Message), Payload: d.payload(s.Message), Reply: s.Reply}
	}
	l.Definitions = d.defs
	return l, sortDiags(d.diags)
}

// payload is the schema of a message type, at its declaration.
func (d *deriver) payload(t *types.Named) *Schema {
	if isRawRecord(t) {
		// Not decoded at all: any bytes, JSON or not.
		return &Schema{GoType: "runtime.RawRecord", Description: "Any record, undecoded: runtime.RawRecord hands the handler its bytes, partition key and headers."}
	}
	return d.schema(t, where{pos: d.fset.Position(t.Obj().Pos()), what: "type " + d.typeName(t)})
}

// headers is the schema of a header contract: every header is text on the
// wire; its pattern or format says what the generated decoder parses.
func (d *deriver) headers(h *Headers) *Schema {
	s := &Schema{Type: TypeSet{"object"}, Properties: map[string]*Schema{}, GoType: d.typeName(h.Type), pos: d.fset.Position(h.Type.Obj().Pos())}
	for _, f := range h.Fields {
		fs := &Schema{Type: TypeSet{"string"}, GoField: f.GoName, pos: f.Pos}
		t := types.Unalias(f.Type)
		switch b, _ := t.Underlying().(*types.Basic); {
		case isTime(t):
			fs.Format, fs.GoType = "date-time", "time.Time"
		case b == nil:
		case b.Info()&types.IsUnsigned != 0:
			fs.Pattern, fs.GoType = "^[0-9]+$", types.Typ[b.Kind()].Name()
		case b.Info()&types.IsInteger != 0:
			fs.Pattern, fs.GoType = "^-?[0-9]+$", types.Typ[b.Kind()].Name()
		case b.Kind() == types.Bool:
			fs.Pattern, fs.GoType = "^(true|false)$", "bool"
		}
		if f.Header == "partition-key" {
			fs.PartitionKey = true
		}
		s.Properties[f.Header] = fs
	}
	return s
}

// Marshal is the lock file's content: indented JSON with sorted keys.
func (l *Lock) Marshal() []byte {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		panic("contract: a lock does not encode: " + err.Error()) // only strings, numbers and maps
	}
	return append(b, '\n')
}

// ParseLock reads a kinesis.lock.json.
func ParseLock(src []byte) (*Lock, error) {
	var l Lock
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("not a kinesisgen lock: %w", err)
	}
	if l.Version != LockVersion {
		return nil, fmt.Errorf("lock format %d; this kinesisgen reads format %d", l.Version, LockVersion)
	}
	return &l, nil
}

// Empty reports whether the lock records nothing.
func (l *Lock) Empty() bool { return len(l.Messages) == 0 && len(l.Subscribers) == 0 }

// lineOf returns the 1-based line and column of the first line of src
// containing needle, for diagnostics about what the lock has and the code
// lost; 1:1 when it is not found.
func lineOf(src []byte, needle string) (int, int) {
	for i, line := range strings.Split(string(src), "\n") {
		if c := strings.Index(line, needle); c >= 0 {
			return i + 1, c + 1
		}
	}
	return 1, 1
}
