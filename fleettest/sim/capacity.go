package sim

import (
	"strconv"
	"strings"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// DynamoDB capacity, as the service bills it (Developer Guide, "Read/write
// capacity mode"): a strongly consistent read costs one read unit per 4 KB
// of the item (a Scan: of the bytes it reads, per page, before any filter),
// an eventually consistent one half that; a write costs one write unit per
// 1 KB of the larger of the item before and after, and a write refused by
// its condition costs the same. The DynamoDB lease store reads strongly
// consistently (GetItem and Scan with ConsistentRead) and writes every
// change as a conditional UpdateItem or PutItem.

// Prices are on-demand prices in US dollars per million request units.
type Prices struct {
	Read, Write float64
}

// OnDemand are the on-demand prices of a standard table in us-east-1 since
// the price cut of November 2024: $0.125 per million read request units,
// $0.625 per million write request units. Other regions cost more.
var OnDemand = Prices{Read: 0.125, Write: 0.625}

// SecondsPerMonth is a month of 730 hours, as AWS prices a month.
const SecondsPerMonth = 730 * 3600

// Monthly is the on-demand cost of rcu read and wcu write units a second,
// sustained for a month.
func (p Prices) Monthly(rcuPerSec, wcuPerSec float64) float64 {
	return (rcuPerSec*p.Read + wcuPerSec*p.Write) * SecondsPerMonth / 1e6
}

func readUnits(size int) int64  { return max(1, int64((size+4095)/4096)) }
func writeUnits(size int) int64 { return max(1, int64((size+1023)/1024)) }

// scanUnits is the read units of a strongly consistent Scan that read b
// bytes (pages of 1 MB at most, each rounded up to 4 KB).
func scanUnits(b int64) int64 {
	const page = 1 << 20
	var u int64
	for ; b > page; b -= page {
		u += page / 4096
	}
	return u + max(1, (b+4095)/4096)
}

// queryUnits is the read units of a strongly consistent Query that read b
// bytes of items: their total size rounded up to 4 KB, once per call (per
// 1 MB page), one unit at least.
func queryUnits(b int64) int64 { return scanUnits(b) }

// numBytes is the DynamoDB size of a number: its significant digits, two
// to a byte, plus one.
func numBytes(v int64) int {
	d := strings.TrimRight(strings.TrimLeft(strconv.FormatInt(max(v, -v), 10), "0"), "0")
	return (len(d)+1)/2 + 1
}

// ItemBytes is the DynamoDB size of l's item in the DynamoDB store's own
// layout: per attribute, its name plus its value (a string's UTF-8 bytes,
// a number's significant digits two to a byte plus one, a string set's
// strings), with the 13-character write token every write sets.
func ItemBytes(l lease.Lease) int {
	n := 0
	str := func(name, v string) {
		if v != "" {
			n += len(name) + len(v)
		}
	}
	num := func(name string, v int64) { n += len(name) + numBytes(v) }
	set := func(name string, vs []string) {
		if len(vs) > 0 {
			n += len(name)
			for _, v := range vs {
				n += len(v)
			}
		}
	}
	str("leaseKey", l.Key)
	num("leaseCounter", l.Counter)
	num("checkpointSubSequenceNumber", l.SubSequence)
	num("ownerSwitchesSinceCheckpoint", l.OwnerSwitchesSinceCheckpoint)
	str("shardId", l.ShardID)
	str("leaseOwner", l.Owner)
	str("checkpoint", l.Checkpoint)
	str("startingHashKey", l.StartingHashKey)
	str("endingHashKey", l.EndingHashKey)
	str("pendingOwner", l.PendingOwner)
	set("parentShardId", l.ParentShardIDs)
	set("childShardIds", l.ChildShardIDs)
	str("writeToken", "0123456789abc")
	return n
}
