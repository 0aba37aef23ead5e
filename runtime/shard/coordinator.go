// Package shard reads one stream for one subscription: it follows shard
// lineage, takes and renews leases, runs a reader per owned shard, and turns
// settled records into checkpoints through a watermark.
package shard

// OWNER: shard-coordinator helper (issue 3). Contract skeleton; fill in.

import (
	"context"
	"log/slog"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Record is one user record read from a shard (KPL-aggregated records are
// already expanded, each with its SubSequence).
type Record struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	SubSequence    int64
	PartitionKey   string
	Data           []byte
	ArrivalTime    time.Time
	settle         func()
}

// Settle marks the record handled (whatever the outcome). The shard's
// checkpoint advances over the contiguous run of settled records. Settling
// twice is harmless.
func (r *Record) Settle() {
	if r.settle != nil {
		r.settle()
	}
}

// Sink receives records in shard order. It may block (backpressure: the
// shard's reader waits); it returns a non-nil error only when ctx ends.
type Sink func(ctx context.Context, r *Record) error

// Config describes one stream's coordinator. Zero durations take defaults.
type Config struct {
	Stream     string
	Namespace  string // lease namespace (application + stream)
	Client     kinesisapi.API
	Leases     lease.Store
	Owner      string
	Logger     *slog.Logger
	Start      Position
	BatchSize  int32         // GetRecords Limit, default 10000
	Poll       time.Duration // wait between empty reads, default 1 s (service budget: 5 reads/s/shard)
	Sync       time.Duration // shard re-listing, default 10 s
	Renew      time.Duration // lease renewal, default 3 s
	Failover   time.Duration // lease expiry as observed locally, default 10 s
	Checkpoint time.Duration // how often settled progress is persisted, default 1 s
	Sink       Sink
}

// Coordinator runs the readers of one stream.
type Coordinator struct{}

// New validates cfg; it does no I/O.
func New(cfg Config) (*Coordinator, error) { panic("TODO issue 3") }

// Start runs the first pass (list shards, take leases, fetch every owned
// shard's first iterator) and returns; readers and the sync loop keep running
// until Stop.
func (c *Coordinator) Start(ctx context.Context) error { panic("TODO issue 3") }

// Seek repositions every owned shard. Settlements of records delivered
// before the seek never move a checkpoint.
func (c *Coordinator) Seek(ctx context.Context, p Position) error { panic("TODO issue 3") }

// Stop stops fetching, waits (bounded by ctx) for delivered records to settle,
// writes final checkpoints and releases leases.
func (c *Coordinator) Stop(ctx context.Context) error { panic("TODO issue 3") }
