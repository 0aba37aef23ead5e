// Package odd has declarations that are legal Go but unusual: a receiver
// declared through an alias, and byte slices of a named byte type.
package odd

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

import "context"

// Service handles Blobs through its alias Svc.
type Service struct{ Got chan Blob }

// Svc is an alias of Service; methods declared on it are Service's.
type Svc = Service

// Octet is a named byte type: encoding/json writes a []Octet as base64, as
// it writes a []byte.
type Octet byte

// Octets is a named slice of Octet.
type Octets []Octet

// Blob carries bytes in every spelling.
//
//kinesis:message stream=odd.blobs
type Blob struct {
	Raw    []byte   `json:"raw"`
	Octets []Octet  `json:"octets"`
	Named  Octets   `json:"named"`
	Fixed  [2]Octet `json:"fixed"` // an array is a JSON array, of bytes or not
}

// OnBlob is a method declared on the alias.
//
//kinesis:subscriber stream=odd.blobs
func (s *Svc) OnBlob(ctx context.Context, b Blob) error {
	s.Got <- b
	return nil
}
