package kinesistest

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The service's per-shard limits.
const (
	writeRecordsPerSecond = 1000
	writeBytesPerSecond   = 1 << 20
	readCallsPerSecond    = 5
)

// rates counts a shard's traffic in the current one-second window; guarded
// by the shard's mu.
type rates struct {
	putSecond  int64
	putRecords int
	putBytes   int
	getSecond  int64
	getCalls   int
}

// admitPut reports whether one more record of n bytes fits this second;
// sh.mu is held.
func (sh *shard) admitPut(now time.Time, n int) bool {
	r := &sh.rates
	if sec := now.Unix(); sec != r.putSecond {
		r.putSecond, r.putRecords, r.putBytes = sec, 0, 0
	}
	// The first record of a second always fits, so a maximal record (1 MiB
	// of data plus its key) can be written at all.
	if r.putRecords+1 > writeRecordsPerSecond || (r.putRecords > 0 && r.putBytes+n > writeBytesPerSecond) {
		return false
	}
	r.putRecords++
	r.putBytes += n
	return true
}

// admitGet reports whether one more GetRecords call fits this second.
func (sh *shard) admitGet(now time.Time) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := &sh.rates
	if sec := now.Unix(); sec != r.getSecond {
		r.getSecond, r.getCalls = sec, 0
	}
	if r.getCalls+1 > readCallsPerSecond {
		return false
	}
	r.getCalls++
	return true
}

func throttled(sh *shard, stream, account string) error {
	return &types.ProvisionedThroughputExceededException{Message: msg("Rate exceeded for shard %s in stream %s under account %s.", sh.id, stream, account)}
}
