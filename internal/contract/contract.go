// Package contract derives the message contract of a kinesisgen package —
// JSON Schemas of its messages as encoding/json writes them, an AsyncAPI 3
// document and a kinesis.lock.json — and finds the breaking changes between
// a lock and the code.
//
// It is fed by the generator's validated model (internal/gen builds a
// Package) and, like the generator, returns data and writes nothing.
package contract

import (
	"go/token"
	"go/types"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// LockFile is the name of the lock in each package directory.
const LockFile = "kinesis.lock.json"

// Package is what one package declares: its messages, header contracts and
// subscribers, with their types and positions.
type Package struct {
	Path  string // import path
	Name  string
	Types *types.Package
	Fset  *token.FileSet
	// Doc returns the doc comment (directives dropped) of the type or field
	// declared at pos, or "".
	Doc         func(pos token.Pos) string
	Messages    []*Message    // sorted by name
	Subscribers []*Subscriber // sorted by name
}

// Message is a //kinesis:message type.
type Message struct {
	Name    string
	Type    *types.Named
	Doc     string
	Marker  *annotations.Message
	Headers *Headers // nil without headers=
	// Publisher is the generated constructor (NewXPublisher).
	Publisher string
}

// Headers is a header contract: a struct with kinesis-tagged fields.
type Headers struct {
	Name   string
	Type   *types.Named
	Fields []HeaderField
}

// HeaderField is one tagged field of a header contract.
type HeaderField struct {
	GoName string
	Header string
	Type   types.Type
	Pos    token.Position
	Doc    string
}

// Subscriber is a //kinesis:subscriber handler.
type Subscriber struct {
	Name    string // as Go writes a method expression: Handle or Ledger.Settle
	Doc     string
	Marker  *annotations.Subscriber
	Pos     token.Position
	Message *types.Named // the message parameter's type
	Headers *Headers     // the headers parameter's contract, when it is one of this package
	// Publishes names the messages of this package the handler is given
	// publishers of, in parameter order; Reply the message it returns, or "".
	Publishes []string
	Reply     string
}

func (p *Package) message(name string) *Message {
	for _, m := range p.Messages {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// messageOf returns the //kinesis:message of p that t is, or nil.
func (p *Package) messageOf(t *types.Named) *Message {
	if t.Obj().Pkg() != p.Types {
		return nil
	}
	return p.message(t.Obj().Name())
}
