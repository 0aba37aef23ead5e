package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// measuredStore is a memory store that measures its Lists as the DynamoDB
// store does (lease.ListCost): ListUnits is what the last List cost, so a
// change of the table's size (scan, the units a List would cost now)
// shows only after the next List. It counts Lists and reads by key.
type measuredStore struct {
	*lease.Memory
	mu            sync.Mutex
	scan          float64 // what a List costs now
	units         float64 // what the last List cost
	measured      bool
	lists, byKeys int
}

func (s *measuredStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	s.mu.Lock()
	s.lists++
	s.units, s.measured = s.scan, true
	s.mu.Unlock()
	return s.Memory.List(ctx, ns)
}

func (s *measuredStore) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	s.mu.Lock()
	s.byKeys++
	s.mu.Unlock()
	return s.Memory.GetMany(ctx, keys)
}

func (s *measuredStore) ListUnits(string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.units, s.measured
}

// setScan sets what a List costs from now on (the table grew or shrank).
func (s *measuredStore) setScan(units float64) {
	s.mu.Lock()
	s.scan = units
	s.mu.Unlock()
}

func (s *measuredStore) counts() (lists, byKeys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists, s.byKeys
}

// noKinesis is a client the listing never calls.
type noKinesis struct{ kinesisapi.API }

// listingCoordinator is a coordinator with liveness per instance over a
// measuredStore holding the leases of shards shards, listed once (the
// first listing, by List, which measured scan units), and the lineage of
// those shards.
func listingCoordinator(t *testing.T, shards int, scan float64) (*Coordinator, *Lineage, *measuredStore) {
	t.Helper()
	ctx := context.Background()
	st := &measuredStore{Memory: lease.NewMemory(), scan: scan}
	const ns = "test/listing"
	var ss []types.Shard
	for i := range shards {
		id := fmt.Sprintf("shardId-%012d", i)
		ss = append(ss, types.Shard{ShardId: aws.String(id)})
		if _, err := st.Create(ctx, lease.Lease{Key: lease.KeyFor(ns, id), ShardID: id}); err != nil {
			t.Fatal(err)
		}
	}
	lin, err := NewLineage(ss)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{
		Stream: "listing", Namespace: ns, Client: noKinesis{}, Leases: st, Owner: "a",
		Sink:     func(context.Context, []Record) (int, error) { return 0, nil },
		Liveness: LivenessPerInstance,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.lookup == nil || c.listCost == nil {
		t.Fatal("the coordinator reads neither by key nor by the List's cost")
	}
	c.list(t, lin)
	if lists, byKeys := st.counts(); lists != 1 || byKeys != 0 {
		t.Fatalf("first listing: %d Lists, %d by key; want one List", lists, byKeys)
	}
	return c, lin, st
}

// list lists the leases as a pass does, and keeps them as known.
func (c *Coordinator) list(t *testing.T, lin *Lineage) {
	t.Helper()
	ls, err := c.listLeases(context.Background(), lin)
	if err != nil {
		t.Fatal(err)
	}
	c.known = make(map[string]lease.Lease, len(ls))
	for _, l := range ls {
		c.known[l.ShardID] = l
	}
}

// A coordinator reading by key because its last List (a Scan of a table
// shared with other namespaces) cost more than the by-key reads Scans
// again now and then, at doubling intervals, to see whether the table has
// shrunk: so few re-measures that they add little to the by-key reads,
// yet the Scan comes back at most 256 by-key listings after the
// table shrank. (Before, only a List measured what a List costs, and a
// coordinator reading by key never listed again: it read by key for
// ever, at one read unit a lease against a tenth of one by Scan.)
func TestListingReMeasuresTheScan(t *testing.T) {
	const shards = 8
	// The re-measure intervals listLeases promises.
	const first, most = 8, 256
	// The Scan dearer than the reads by key: the coordinator reads by key.
	c, lin, st := listingCoordinator(t, shards, 10*shards)

	// The table stays large: a re-measure after 8 by-key listings, then
	// 16, 32, 64: 4 in the next 150 listings.
	const n = 150
	for range n {
		c.list(t, lin)
	}
	lists, byKeys := st.counts()
	t.Logf("the Scan dearer: %d listings after the first, %d by List, %d by key", n, lists-1, byKeys)
	if lists-1 < 1 || lists-1 > 4 {
		t.Errorf("%d listings with the Scan dearer: %d re-measuring Lists; want 1 to 4 (after 8, 16, 32 and 64 by-key listings)", n, lists-1)
	}

	// The table shrinks: within the interval (now 128) the coordinator
	// Scans, and from then on every listing is a Scan.
	st.setScan(2)
	l0, _ := st.counts()
	back := -1
	for i := range most + 1 {
		c.list(t, lin)
		if lists, _ := st.counts(); lists > l0 {
			back = i + 1
			break
		}
	}
	if back < 0 {
		t.Fatalf("the table shrank, and %d listings later the coordinator still reads by key", most+1)
	}
	t.Logf("the table shrank: back to Scanning after %d listings", back)
	_, b1 := st.counts()
	for range 20 {
		c.list(t, lin)
	}
	if lists, byKeys := st.counts(); byKeys != b1 || lists != l0+1+20 {
		t.Errorf("after the re-measure found the Scan cheaper: %d of 20 listings by key; want none", byKeys-b1)
	}

	// The table grows again: the Scan measures it and the coordinator reads
	// by key, re-measuring after 8 again (the interval starts over).
	st.setScan(10 * shards)
	c.list(t, lin) // the Scan that measures the growth
	l1, _ := st.counts()
	for range first + 1 {
		c.list(t, lin)
	}
	if lists, _ := st.counts(); lists != l1+1 {
		t.Errorf("the table grew again: %d Lists in the next %d listings; want 1 (the interval starts over at %d)", lists-l1, first+1, first)
	}
}
