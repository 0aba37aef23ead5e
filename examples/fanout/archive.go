// Package main archives a stream of clicks with an enhanced fan-out
// subscriber: Kinesis pushes each shard's records to the registered stream
// consumer "archiver" over HTTP/2 (SubscribeToShard), with each shard's
// 2 MB/s for this consumer alone and no GetRecords polling. The archive is
// a JSON-lines file per shard.
package main

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Click is one click on the site, keyed by user.
//
//kinesis:message stream=clicks
type Click struct {
	ID   int    `json:"id"`
	User string `json:"user"`
	Page string `json:"page"`
}

// Line is one line of a shard's archive file.
type Line struct {
	Seq   string `json:"seq"`
	Key   string `json:"key"`
	Click Click  `json:"click"`
}

// Archive appends every click to DIR/SHARD.jsonl.
type Archive struct {
	dir string

	mu    sync.Mutex
	files map[string]*os.File
	seen  map[string]bool // sequence numbers archived: delivery is at least once
	done  chan struct{}   // closed when want records are archived
	want  int
}

// NewArchive archives into dir; Wait returns once want records are in.
func NewArchive(dir string, want int) *Archive {
	return &Archive{dir: dir, files: map[string]*os.File{}, seen: map[string]bool{}, done: make(chan struct{}), want: want}
}

// Store is the fan-out subscriber: fanout=archiver reads through the
// stream consumer "archiver", registered (with the stream) at Connect
// since create_if_missing is set. Four lanes by key: a user's clicks are
// archived in order, four users at once.
//
//kinesis:subscriber stream=clicks create_if_missing=4 fanout=archiver workers=4 by_key
func (a *Archive) Store(ctx context.Context, c Click, d runtime.Delivery) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen[d.SequenceNumber] {
		return nil // redelivered after a restart or a handoff: already archived
	}
	f, ok := a.files[d.ShardID]
	if !ok {
		var err error
		f, err = os.OpenFile(filepath.Join(a.dir, d.ShardID+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err // retried
		}
		a.files[d.ShardID] = f
	}
	line, err := json.Marshal(Line{Seq: d.SequenceNumber, Key: d.PartitionKey, Click: c})
	if err != nil {
		return runtime.Permanent(err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("archive %s: %w", d.ShardID, err)
	}
	a.seen[d.SequenceNumber] = true
	if len(a.seen) == a.want {
		close(a.done)
	}
	return nil
}

// Wait returns when every record is archived, or ctx ends.
func (a *Archive) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close closes the shard files.
func (a *Archive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for _, f := range a.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
