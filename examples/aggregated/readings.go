// Package main publishes many small messages through an aggregating
// producer: the message marker's `aggregate` packs them into KPL aggregates
// (many messages per Kinesis record, the format every KCL reads), each
// aggregate holding only keys of one shard, so that every message is read
// on its own key's shard, under its own key, in its key's order. A
// subscriber checks that order.
package main

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

import (
	"context"
	"fmt"
	"sync"
)

// Reading is one sensor reading, keyed by sensor; Seq counts each sensor's
// readings from 1. Small messages like this are where aggregation pays:
// one Kinesis record (and PUT payload unit) carries hundreds of them.
//
//kinesis:message stream=readings aggregate
type Reading struct {
	Sensor string  `json:"sensor"`
	Seq    int     `json:"seq"`
	Value  float64 `json:"value"`
}

// Checker follows each sensor's readings and notes any out of order.
type Checker struct {
	mu       sync.Mutex
	last     map[string]int // sensor -> last Seq handled
	handled  int            // distinct readings
	problems []string
	want     int
	done     chan struct{}
}

// NewChecker expects want distinct readings.
func NewChecker(want int) *Checker {
	return &Checker{last: map[string]int{}, want: want, done: make(chan struct{})}
}

// Check is the subscriber; the aggregates are taken apart before it, so it
// gets one reading at a time. Eight lanes by key: a sensor's readings come
// one after another, in their order on the shard.
//
//kinesis:subscriber stream=readings create_if_missing=4 workers=8 by_key
func (c *Checker) Check(ctx context.Context, r Reading) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.last[r.Sensor]
	switch {
	case r.Seq <= last:
		return nil // a redelivery (delivery is at least once): seen already
	case r.Seq != last+1:
		c.problems = append(c.problems, fmt.Sprintf("sensor %s: reading %d after %d", r.Sensor, r.Seq, last))
	}
	c.last[r.Sensor] = r.Seq
	c.handled++
	if c.handled == c.want {
		close(c.done)
	}
	return nil
}

// Wait returns the order problems found once want readings are handled.
func (c *Checker) Wait(ctx context.Context) ([]string, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...), nil
}
