// Package fleettest proves that several OS processes of one service share a
// stream through a DynamoDB lease table: fleet_test.go runs the worker
// command (fleettest/worker) three times against kinesalite and dynalite,
// kills one, stops another, and checks what every record went through
// (TestFleet, polling; TestFleetFanOut, the same by enhanced fan-out on
// kinesis-mock).
//
// This file is the protocol between the two: the message the test publishes
// and the lines a worker prints.
package fleettest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Item is the message of the test stream. Index counts the records of one
// key from 0, in publish order, so a reader can tell order and duplicates.
type Item struct {
	Key   string `json:"key"`
	Index int    `json:"index"`
}

// KeyName is the partition key of key number k.
func KeyName(k int) string { return fmt.Sprintf("key-%03d", k) }

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

// Stats is one metrics line of a worker: its lease-store calls so far, and
// its Kinesis read calls. Printed as
// "#stats owner unixNano writes checkpoints reads getrecords subscribes".
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
	// GetRecords and SubscribeToShard count the Kinesis calls that read
	// records: a polling worker makes only the first, one reading by
	// enhanced fan-out (nearly) only the second.
	GetRecords, SubscribeToShard int64
}

// String formats s as the worker prints it, with a trailing newline.
func (s Stats) String() string {
	return fmt.Sprintf("#stats %s %d %d %d %d %d %d\n", s.Owner, s.UnixNano, s.Writes, s.Checkpoints, s.Reads, s.GetRecords, s.SubscribeToShard)
}

// ParseLine reads one worker line: exactly one of the results is non-nil
// when err is nil.
func ParseLine(line string) (*Handled, *Stats, error) {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "#stats" {
		if len(f) != 8 {
			return nil, nil, fmt.Errorf("stats line %q: want 8 fields", line)
		}
		var nums [6]int64
		for i, s := range f[2:] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("stats line %q: %v", line, err)
			}
			nums[i] = n
		}
		return nil, &Stats{Owner: f[1], UnixNano: nums[0], Writes: nums[1], Checkpoints: nums[2], Reads: nums[3],
			GetRecords: nums[4], SubscribeToShard: nums[5]}, nil
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

// PublishCommand asks a worker, on its standard input, to publish indices
// [From, From+N) of keys First, First+Stride, … below Keys: one goroutine
// per key, each record published until a call succeeds, Pause between a
// key's records (so faults meet records over a window, not in one burst).
// Printed as "publish first stride keys from n pauseMillis".
type PublishCommand struct {
	First, Stride, Keys int
	From, N             int
	Pause               time.Duration // whole milliseconds
}

// String formats c as the worker reads it, with a trailing newline.
func (c PublishCommand) String() string {
	return fmt.Sprintf("publish %d %d %d %d %d %d\n", c.First, c.Stride, c.Keys, c.From, c.N, c.Pause.Milliseconds())
}

// ParsePublishCommand reads one command line of a worker's standard input.
func ParsePublishCommand(line string) (PublishCommand, error) {
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "publish" {
		return PublishCommand{}, fmt.Errorf("command %q: want \"publish first stride keys from n pauseMillis\"", line)
	}
	var n [6]int
	for i, s := range f[1:] {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return PublishCommand{}, fmt.Errorf("command %q: bad number %q", line, s)
		}
		n[i] = v
	}
	c := PublishCommand{First: n[0], Stride: n[1], Keys: n[2], From: n[3], N: n[4], Pause: time.Duration(n[5]) * time.Millisecond}
	if c.Stride == 0 {
		return PublishCommand{}, fmt.Errorf("command %q: stride 0", line)
	}
	return c, nil
}

// Published is one publish call a worker made for a PublishCommand, printed
// after the call returned: "#pub owner key index micros ok" or
// "#pub owner key index micros err message" (the worker then publishes the
// same index again). "#pubdone owner" follows the command's last record.
type Published struct {
	Owner string
	Key   string
	Index int
	Took  time.Duration // how long the call took to return
	Err   string        // "" when the call succeeded; newlines become spaces
}

// String formats p as the worker prints it, with a trailing newline.
func (p Published) String() string {
	status := "ok"
	if p.Err != "" {
		status = "err " + strings.Join(strings.Fields(p.Err), " ")
	}
	return fmt.Sprintf("#pub %s %s %d %d %s\n", p.Owner, p.Key, p.Index, p.Took.Microseconds(), status)
}

// PublishDone is the line a worker prints when a PublishCommand is done.
func PublishDone(owner string) string { return "#pubdone " + owner + "\n" }

// ParsePublished reads a "#pub" or "#pubdone" line: pub is nil for
// "#pubdone", whose owner is returned in done.
func ParsePublished(line string) (pub *Published, done string, err error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "#pubdone":
		return nil, f[1], nil
	case len(f) < 6 || f[0] != "#pub":
		return nil, "", fmt.Errorf("publish line %q: want \"#pub owner key index micros ok|err message\"", line)
	}
	idx, err1 := strconv.Atoi(f[3])
	micros, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || idx < 0 || micros < 0 {
		return nil, "", fmt.Errorf("publish line %q: bad index or duration", line)
	}
	p := &Published{Owner: f[1], Key: f[2], Index: idx, Took: time.Duration(micros) * time.Microsecond}
	switch {
	case f[5] == "ok" && len(f) == 6:
	case f[5] == "err" && len(f) > 6:
		p.Err = strings.Join(f[6:], " ")
	default:
		return nil, "", fmt.Errorf("publish line %q: want ok, or err and a message", line)
	}
	return p, "", nil
}
