package runtime

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// testAggregator is an aggregator without goroutines or client, whose
// shard map is n shards of equal ranges.
// testEntries is the entry pool of the tests' aggregators, which have no
// batcher.
var testEntries entryPool

func testAggregator(n int) *aggregator {
	a := &aggregator{cfg: Aggregation{}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	step := uint64(math.MaxUint64 / uint64(n))
	for i := range n {
		lo := shard.HashKey{Hi: uint64(i) * step}
		hi := shard.HashKey{Hi: uint64(i+1)*step - 1, Lo: math.MaxUint64}
		if i == n-1 {
			hi.Hi = math.MaxUint64
		}
		a.shards = append(a.shards, &aggShard{id: "shard-" + strconv.Itoa(i), rng: shard.HashRange{Start: lo, End: hi}, hashKey: lo.String()})
	}
	return a
}

// BenchmarkAggregatorPass measures the aggregator goroutine's own work per
// message, without goroutines, calls or waiting: messages of 10,000 keys
// (195 bytes each) routed to 4 shards in passes of 2,000, every unit then
// encoded (claim) and stored (release, resolve), as run does for units
// that come back from the batcher. What it leaves out (JSON, the caller's
// wait, the PutRecords call) the bare loop pays too.
func BenchmarkAggregatorPass(b *testing.B) {
	a := testAggregator(4)
	a.reuse = true // as with the SDK's client
	keys := make([]string, 10000)
	hks := make([]shard.HashKey, len(keys))
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
		hks[i] = shard.HashKeyOf(keys[i])
	}
	data := []byte(`{"id":12345,"kind":"order.created","account":"acct-0042","body":"` + strings.Repeat("x", 130) + `"}`)
	// The callers' ctx, as StartAll's: one that can end, which claim checks.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pass = 2000
	var units []*aggUnit
	now := time.Now()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		m := min(pass, b.N-done)
		for i := range m {
			k := (done + i) % len(keys)
			e := testEntries.get()
			e.ctx, e.key, e.data, e.ordered, e.hk = ctx, keys[k], data, true, hks[k]
			e.state.Store(entryQueued)
			a.unrouted = append(a.unrouted, e)
		}
		done += m
		a.routeAll(now)
		for {
			units = units[:0]
			for _, sh := range a.shards {
				units = append(units, sh.sealed...)
				clear(sh.sealed)
				sh.sealed = sh.sealed[:0]
				if sh.open != nil {
					units = append(units, sh.open)
					sh.open = nil
				}
			}
			if len(units) == 0 {
				break
			}
			for _, u := range units {
				if !a.claim(u, now) {
					b.Fatal("a unit with nothing to send")
				}
			}
			a.seal(units)
			for _, u := range units {
				a.back(u)
				a.release(u, now)
				a.stored(u, Receipt{ShardID: u.sh.id, SequenceNumber: "1"})
				for _, e := range u.items {
					<-e.done
					e.recycle()
				}
			}
		}
	}
}
