package fleettest

import (
	"testing"
	"time"
)

// The fleet check excuses a record read again after its reader's lease
// was fenced (the worker's log says so), and nothing else: a second
// handling with no fence between the two is still a defect.
func TestReadAgainAfterFenceNeedsTheFenceBetween(t *testing.T) {
	log := []byte(`time=2026-12-07T04:52:02.735Z level=WARN msg="heartbeat failed" owner=w2 err="deadline"
time=2026-12-07T04:52:02.737Z level=WARN msg="lease not renewed in time: reader fenced, its records left to the next owner" handler=fleettest.worker stream=s owner=w2 shard=shardId-000000000001 failover=3s
time=2026-12-07T04:52:09.000Z level=WARN msg="lease lost; reader stopped" owner=w2 shard=shardId-000000000003 new_owner=w3
`)
	fs := fences{}
	fs.read("w2", log)
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, "2026-12-07T04:52:"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	if len(fs) != 2 {
		t.Fatalf("fences read: %v, want shards 1 and 3 of w2", fs)
	}
	for _, tc := range []struct {
		name string
		ss   []sighting
		want bool
	}{
		{"again by itself after its fence", []sighting{{owner: "w2", shard: "shardId-000000000001", at: at("01.000")}, {owner: "w2", shard: "shardId-000000000001", at: at("05.000")}}, true},
		{"again by another after a lost lease", []sighting{{owner: "w2", shard: "shardId-000000000003", at: at("08.500")}, {owner: "w3", shard: "shardId-000000000003", at: at("10.000")}}, true},
		{"the fence of another shard", []sighting{{owner: "w2", shard: "shardId-000000000002", at: at("01.000")}, {owner: "w2", shard: "shardId-000000000002", at: at("05.000")}}, false},
		{"both handlings before the fence", []sighting{{owner: "w2", shard: "shardId-000000000001", at: at("00.100")}, {owner: "w2", shard: "shardId-000000000001", at: at("00.500")}}, false},
		{"a third handling with no fence before it", []sighting{{owner: "w2", shard: "shardId-000000000001", at: at("01.000")}, {owner: "w2", shard: "shardId-000000000001", at: at("05.000")}, {owner: "w2", shard: "shardId-000000000001", at: at("07.000")}}, false},
	} {
		if got := readAgainAfterFence(tc.ss, fs); got != tc.want {
			t.Errorf("%s: excused %v, want %v", tc.name, got, tc.want)
		}
	}
}
