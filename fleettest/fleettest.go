// Package fleettest proves that several OS processes of one service share a
// stream through a DynamoDB lease table: fleet_test.go runs the worker
// command (fleettest/worker) three times against kinesalite and dynalite,
// kills one, stops another, and checks what every record went through.
//
// This file is the protocol between the two: the message the test publishes
// and the lines a worker prints.
package fleettest

import (
	"fmt"
	"strconv"
	"strings"
)

// Item is the message of the test stream. Index counts the records of one
// key from 0, in publish order, so a reader can tell order and duplicates.
type Item struct {
	Key   string `json:"key"`
	Index int    `json:"index"`
}

// Handled is one line a worker prints for a record it handled, before it
// acknowledges it: "owner key index shard seq".
type Handled struct {
	Owner    string
	Key      string
	Index    int
	Shard    string
	Sequence string
}

// String formats h as the worker prints it, with a trailing newline.
func (h Handled) String() string {
	return fmt.Sprintf("%s %s %d %s %s\n", h.Owner, h.Key, h.Index, h.Shard, h.Sequence)
}

// Stats is one metrics line of a worker: its lease-store calls so far.
// Printed as "#stats owner unixNano writes checkpoints reads".
type Stats struct {
	Owner    string
	UnixNano int64
	// Writes counts PutItem, UpdateItem and DeleteItem calls, failed
	// conditional writes included (they are billed too).
	Writes int64
	// Checkpoints counts the writes among them that set the checkpoint
	// attribute; the rest are renewals, takes, releases and handoffs.
	Checkpoints int64
	Reads       int64 // GetItem, Scan, DescribeTable
}

// String formats s as the worker prints it, with a trailing newline.
func (s Stats) String() string {
	return fmt.Sprintf("#stats %s %d %d %d %d\n", s.Owner, s.UnixNano, s.Writes, s.Checkpoints, s.Reads)
}

// ParseLine reads one worker line: exactly one of the results is non-nil
// when err is nil.
func ParseLine(line string) (*Handled, *Stats, error) {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "#stats" {
		if len(f) != 6 {
			return nil, nil, fmt.Errorf("stats line %q: want 6 fields", line)
		}
		var nums [4]int64
		for i, s := range f[2:] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("stats line %q: %v", line, err)
			}
			nums[i] = n
		}
		return nil, &Stats{Owner: f[1], UnixNano: nums[0], Writes: nums[1], Checkpoints: nums[2], Reads: nums[3]}, nil
	}
	if len(f) != 5 {
		return nil, nil, fmt.Errorf("line %q: want \"owner key index shard seq\"", line)
	}
	idx, err := strconv.Atoi(f[2])
	if err != nil || idx < 0 {
		return nil, nil, fmt.Errorf("line %q: bad index", line)
	}
	return &Handled{Owner: f[0], Key: f[1], Index: idx, Shard: f[3], Sequence: f[4]}, nil, nil
}

// CompareSequence orders two Kinesis sequence numbers (decimal strings of
// up to 128 bits): shorter is smaller, equal lengths compare as text.
func CompareSequence(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
