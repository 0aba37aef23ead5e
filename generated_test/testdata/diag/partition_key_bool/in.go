package p

import "time"

// Flag cannot key a record.
type Flag struct {
	VIP bool `kinesis:"partition-key"`
}

// Stamp cannot key a record either.
type Stamp struct {
	At time.Time `kinesis:"partition-key"`
}
