package runtime

// OWNER: publish-side helper (issue 2). Contract skeleton; fill in.

import "context"

// PartitionKeyHeader is the header that names a record's partition key.
const PartitionKeyHeader = "partition-key"

// Headers are a record's user headers.
type Headers map[string]string

// HeaderEncoder is implemented by generated header contracts.
type HeaderEncoder interface{ EncodeHeaders(h Headers) }

// HeaderDecoder is implemented by pointers to generated header contracts.
type HeaderDecoder interface{ DecodeHeaders(h Headers) error }

// Codec turns messages into payloads and back. JSON is the default.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Receipt is where a published record landed.
type Receipt struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	PartitionKey   string
}

// Publisher publishes messages of type T to one stream.
type Publisher[T any] interface {
	Publish(ctx context.Context, msg T) error
	Message(msg T) *Message[T]
}

// Message is one publish being built: msg plus optional key and headers.
type Message[T any] struct{}

func (m *Message[T]) PartitionKey(key string) *Message[T]   { panic("TODO issue 2") }
func (m *Message[T]) Headers(h HeaderEncoder) *Message[T]   { panic("TODO issue 2") }
func (m *Message[T]) Header(name, value string) *Message[T] { panic("TODO issue 2") }
func (m *Message[T]) Publish(ctx context.Context) error     { panic("TODO issue 2") }
func (m *Message[T]) Send(ctx context.Context) (Receipt, error) {
	panic("TODO issue 2")
}

// PublisherSpec is what a //kinesis:message marker says.
type PublisherSpec struct {
	Stream       string
	PartitionKey string // rung 3 of the key ladder, when no option overrides it
}

// PublishOption adjusts a publisher at its mount site.
type PublishOption func(*publishSettings)

type publishSettings struct {
	stream       string
	partitionKey string
}

// WithPartitionKey names the mount-site key (rung 3 of the key ladder).
func WithPartitionKey(key string) PublishOption {
	return func(s *publishSettings) { s.partitionKey = key }
}

// NewPublisher returns a publisher of T; generated NewXPublisher functions call it.
func NewPublisher[T any](b *Broker, spec PublisherSpec, opts ...PublishOption) Publisher[T] {
	panic("TODO issue 2")
}
