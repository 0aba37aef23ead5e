package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// MaxPartitionKeyLength is the service's limit, in Unicode characters.
const MaxPartitionKeyLength = 256

// MaxRecordSize is the service's limit on a record's data plus its partition
// key, in bytes.
const MaxRecordSize = maxRecordBytes

// checkKey reports why key is not a valid partition key: 1 to 256 Unicode
// characters (the service counts characters, not bytes) of valid UTF-8.
func checkKey(key string) error {
	if key == "" {
		return errors.New("empty partition key")
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("partition key %q is not valid UTF-8", key)
	}
	if n := utf8.RuneCountInString(key); n > MaxPartitionKeyLength {
		return fmt.Errorf("partition key has %d characters, more than %d", n, MaxPartitionKeyLength)
	}
	return nil
}

// checkSize reports a record too large for the service.
func checkSize(key string, data []byte) error {
	if n := len(data) + len(key); n > MaxRecordSize {
		return fmt.Errorf("record of %d bytes (data plus partition key) exceeds the %d-byte limit", n, MaxRecordSize)
	}
	return nil
}

// Process-unique keys (rung 4 of the ladder): a random prefix, drawn on
// first use, and a counter. The service hashes keys with MD5, so
// consecutive counters spread evenly over the shards.
var (
	uniquePrefixOnce sync.Once
	uniquePrefix     string
	uniqueCounter    atomic.Uint64
)

func uniqueKey() string {
	uniquePrefixOnce.Do(func() {
		var r [6]byte
		_, _ = rand.Read(r[:])
		uniquePrefix = hex.EncodeToString(r[:]) + "-"
	})
	var buf [32]byte
	b := append(buf[:0], uniquePrefix...)
	b = strconv.AppendUint(b, uniqueCounter.Add(1), 36)
	return string(b)
}
