package dst

import (
	"testing"
	"time"
)

// A parent's last record is another application's retry copy, which its
// reader fetched and its lane skips, unhandled, only after a long wait
// behind other shards' slow handlings: the parent is read meanwhile, and
// its child, waiting for the parent's end, is not unread. Before, the
// check saw no activity for the copy (no handler runs for it) and reported
// the child unread (mix all, seed 1796559867691955090). A copy whose skip
// no checkpoint of its fetcher shows (a fenced reader's, fetched again
// later) still leaves the gap.
func TestUnreadCountsSkippedForeignCopy(t *testing.T) {
	begin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return begin.Add(time.Duration(s * float64(time.Second))) }
	const parent, child = "shardId-000000000002", "shardId-000000000004"
	const copySeq = "49000000000000000000000000000000037300000000000000000002"
	mk := func(checkpoints []cpWrite, fetches ...time.Time) *world {
		a1 := &instance{name: "a1", app: "a", ns: "a", started: at(0)}
		w := &world{
			begin:   begin,
			cfg:     Config{Timing: Timing{Failover: 3 * time.Second, Sync: 2 * time.Second}},
			apps:    []string{"a"},
			insts:   map[string]*instance{"a1": a1},
			order:   []*instance{a1},
			parents: map[string][]string{child: {parent}},
			handled: []handling{
				{app: "a", inst: "a1", id: 1000043, shard: parent, seq: "49000000000000000000000000000000040100000000000000000002", start: at(49.515), end: at(49.530)},
				{app: "a", inst: "a1", id: 5000042, shard: child, seq: "49000000000000000000000000000000050000000000000000000004", start: at(71.409), end: at(71.42)},
			},
			pub:         []published{{id: 5000042, key: "k5", at: at(45), shard: child}},
			foreign:     map[string]map[string][]time.Time{"a1": {parent + "/" + copySeq: fetches}},
			checkpoints: map[string][]cpWrite{"a1": checkpoints},
		}
		return w
	}
	unread := func(w *world) []Violation {
		first := map[string]map[int64]handling{"a": {}}
		for _, h := range w.handled {
			first["a"][h.id] = h
		}
		var c collector
		w.checkUnread(&c, first)
		return c.vs
	}
	ends := []cpWrite{
		{shard: parent, cp: "49000000000000000000000000000000037000000000000000000002", at: at(42)},
		{shard: parent, cp: "SHARD_END", at: at(71.4)},
	}
	if vs := unread(mk(ends, at(41.917))); len(vs) != 0 {
		t.Errorf("the parent's skipped copy, fetched at 41.9 s and checkpointed past at 71.4 s: %v, want no violation", vs)
	}
	// Fetched by a generation that never got past it, then fetched again
	// after the checkpoint: the first fetch counts nothing, the gap stays.
	if vs := unread(mk(ends[:1], at(41.917))); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a copy no checkpoint went past: %v, want one unread", vs)
	}
	if vs := unread(mk(ends, at(41.917), at(65))); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a copy fetched again before the checkpoint past it: %v, want one unread", vs)
	}
}

// A split's parent's last unhandled record, fetched by its owner at once,
// waits in the lane of a key whose backlog that owner took over, behind
// slow handlings of other shards, until the owner leaves: its Stop lets
// the record never begin and releases the parent, and the next owner reads
// it again at once. It waited for a worker of a live owner, as a handled
// record does: the parent is not unread. Before, the check counted a
// fetched record only until its fetcher's handling began, saw none, and
// reported the parent unread for 18 s (mix all, seed 1796561424145306228).
// A reader that never released the lease (nor fenced it, nor left it to
// expire), or released it before its Stop (a handoff), still leaves the
// gap; one that fenced it counts until the fence.
func TestUnreadCountsRecordsLeftAtRelease(t *testing.T) {
	begin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return begin.Add(time.Duration(s * float64(time.Second))) }
	const parent = "shardId-000000000002"
	const seq = "49000000000000000000000000000000011400000000000000000002"
	mk := func(releases, fences []shardAt) *world {
		b0 := &instance{name: "b0", app: "b", ns: "b", started: at(0), gone: at(26.298)}
		b1 := &instance{name: "b1", app: "b", ns: "b", started: at(0)}
		return &world{
			begin: begin,
			cfg: Config{Timing: Timing{Failover: 3 * time.Second, Sync: time.Second},
				Mix: Mix{Slow: 0.05}},
			apps:  []string{"b"},
			insts: map[string]*instance{"b0": b0, "b1": b1},
			order: []*instance{b0, b1},
			handled: []handling{
				{app: "b", inst: "b0", id: 1000016, shard: parent, seq: "49000000000000000000000000000000019100000000000000000002", start: at(16.659), end: at(16.680)},
				{app: "b", inst: "b1", id: 8000008, shard: parent, seq: seq, start: at(50.144), end: at(50.171)},
			},
			pub: []published{{id: 8000008, at: at(5.380), shard: parent}},
			fetched: map[string]map[string][]time.Time{
				"b0": {parent + "/" + seq: {at(11.323)}},
				"b1": {parent + "/" + seq: {at(34.7)}},
			},
			releases:    map[string][]shardAt{"b0": releases},
			leaseFences: map[string][]shardAt{"b0": fences},
		}
	}
	unread := func(w *world) []Violation {
		first := map[string]map[int64]handling{"b": {}}
		for _, h := range w.handled {
			if _, ok := first["b"][h.id]; !ok {
				first["b"][h.id] = h
			}
		}
		var c collector
		w.checkUnread(&c, first)
		return c.vs
	}
	released := []shardAt{{shard: parent, at: at(34.323)}}
	if vs := unread(mk(released, nil)); len(vs) != 0 {
		t.Errorf("a record fetched at 11.3 s, left unhandled by its fetcher's release at 34.3 s and fetched again at 34.7 s: %v, want no violation", vs)
	}
	if vs := unread(mk(nil, nil)); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a record whose fetcher never released the lease: %v, want one unread", vs)
	}
	// Fenced at 12 s, the record counts until the fence (it waited in a
	// live owner's lane until then), and the gap from the fetcher's last
	// handling at 16.7 s to the next fetch at 34.7 s stays.
	if vs := unread(mk(released, []shardAt{{shard: parent, at: at(12)}})); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a record whose fetcher fenced the lease before its release: %v, want one unread", vs)
	}
	// Fenced at 20 s: counted until then, the gap after (14.7 s) is under
	// the bound.
	if vs := unread(mk(released, []shardAt{{shard: parent, at: at(20)}})); len(vs) != 0 {
		t.Errorf("a record whose fetcher fenced the lease at 20 s: %v, want no violation", vs)
	}
	if vs := unread(mk([]shardAt{{shard: parent, at: at(25)}}, nil)); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a record whose fetcher released the lease before its Stop: %v, want one unread", vs)
	}
	// A Stop that ran out of time with a handler stuck on another shard
	// left this lease to expire at 31.5 s (mix stuck, seed 65): the record
	// counts until the expiry, a failover time later.
	w := mk(nil, nil)
	w.leftToExpire = map[string][]shardAt{"b0": {{shard: parent, at: at(31.5)}}}
	if vs := unread(w); len(vs) != 0 {
		t.Errorf("a record in the lanes of a Stop that left its lease to expire: %v, want no violation", vs)
	}
	// Its fetcher crashed at 33 s with the record queued (mix stuck, seed
	// 84): counted until the crash.
	w = mk(nil, nil)
	w.insts["b0"].gone, w.insts["b0"].crashed = at(33), true
	if vs := unread(w); len(vs) != 0 {
		t.Errorf("a record queued until its fetcher crashed: %v, want no violation", vs)
	}
	w.insts["b0"].gone = at(14)
	if vs := unread(w); len(vs) != 1 || vs[0].Kind != "unread" {
		t.Errorf("a record whose fetcher crashed at 14 s, fetched again at 34.7 s: %v, want one unread", vs)
	}
	if vs := unread(mk(released, []shardAt{{shard: "shardId-000000000000", at: at(20)}})); len(vs) != 0 {
		t.Errorf("a record whose fetcher fenced another shard's lease: %v, want no violation", vs)
	}
}
