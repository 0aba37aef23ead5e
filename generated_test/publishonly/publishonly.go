// Package publishonly only publishes: it gets publishers and header methods
// and no Mount. Its types are also read by handlers of package keys.
package publishonly

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

// Event is published here and handled in package keys.
//
//kinesis:message stream=publishonly.events headers=Meta
type Event struct{ Name string }

// Meta is Event's header contract.
type Meta struct {
	Source string `kinesis:"source"`
}

// audit is an unexported message type: its constructor is unexported too.
// Its publishers pack audit lines into KPL aggregates.
//
//kinesis:message stream=publishonly.audit aggregate
type audit struct{ Line string }

var _ = newAuditPublisher
