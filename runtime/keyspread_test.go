package runtime_test

import (
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// A record nobody keyed gets a process-unique key, which spreads the
// records over the shards (the last rung of the key ladder keeps no order).
func TestUnkeyedRecordsSpreadOverTheShards(t *testing.T) {
	e := newEnv(t)
	orders := e.newStream("orders", 4)
	b := e.broker()
	e.connect(b)
	p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
	perShard := map[string]int{}
	const n = 200
	for i := range n {
		r, err := p.Message(order{ID: i}).Send(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		perShard[r.ShardID]++
	}
	// Uniform over 4 shards: 50 each; fewer than 20 on one is a failure
	// with probability below 1e-7.
	if len(perShard) != 4 {
		t.Fatalf("records on %d of 4 shards: %v", len(perShard), perShard)
	}
	for s, c := range perShard {
		if c < 20 {
			t.Errorf("shard %s holds %d of %d records: %v", s, c, n, perShard)
		}
	}
}
