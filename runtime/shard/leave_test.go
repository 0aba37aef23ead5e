package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// lanes is a sink as the runtime's lanes and the fleet simulation's
// handlers are: records queue, workers take them in order, skip a stale
// one (Record.Stale), handle the others for d each and settle them. It
// notes who handled what, when.
type lanes struct {
	owner string
	q     chan shard.Record
	d     time.Duration
	log   *handlings
	wg    sync.WaitGroup
	mu    sync.Mutex
	got   map[recordID]bool // delivered
}

// handlings is what every instance's lanes handled.
type handlings struct {
	mu sync.Mutex
	by map[recordID][]handled
}

type handled struct {
	owner      string
	start, end time.Time
}

func newLanes(owner string, workers int, d time.Duration, log *handlings) *lanes {
	l := &lanes{owner: owner, q: make(chan shard.Record, 1024), d: d, log: log, got: map[recordID]bool{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for r := range l.q {
				if r.Stale() {
					continue
				}
				h := handled{owner: l.owner, start: time.Now()}
				time.Sleep(l.d)
				h.end = time.Now()
				l.log.mu.Lock()
				l.log.by[idOf(&r)] = append(l.log.by[idOf(&r)], h)
				l.log.mu.Unlock()
				r.Settle()
			}
		}()
	}
	return l
}

func (l *lanes) sink(ctx context.Context, rs []shard.Record) (int, error) {
	for i := range rs {
		l.mu.Lock()
		l.got[idOf(&rs[i])] = true
		l.mu.Unlock()
		select {
		case l.q <- rs[i]:
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(rs), nil
}

func (l *lanes) close() {
	close(l.q)
	l.wg.Wait()
}

// A graceful leave of an owner whose lanes hold more records than they can
// handle within Stop's time, while another instance asks for its leases:
// no record published after Stop began is delivered to the leaving owner, and
// no record the leaving owner handled is handled again by the next owner
// (nor at the same time). Before the fix, a handoff postponed during the
// Stop (the per-lease renewals go on, and see the request) read on and
// handed the leaver new records; and Stop, out of time, released the
// leases while its handlers still ran records, which the next owner
// handled again meanwhile (fleettest/sim's TestSlowHandlersPostponeHandoffs
// in its leave phase, whenever the leaver held leases with a backlog).
func TestLeaveWithABacklogHandsOverNothingBeingHandled(t *testing.T) {
	e, _ := memEnvIn(t, 2, shard.LivenessPerLease)
	ids := e.shards()
	log := &handlings{by: map[recordID][]handled{}}
	la := newLanes("a", 2, 600*time.Millisecond, log)
	lb := newLanes("b", 4, 0, log)
	defer lb.close()
	cfgA, cfgB := e.config("a", la.sink), e.config("b", lb.sink)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, 2*time.Second // Handoff/2: 1 s
	}
	a := e.startStopped(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	want := map[string]int{}
	e.publish(want, 30, 6) // 9 s of handling for a's two lanes
	eventually(t, 5*time.Second, "a's lanes hold the 30 records", func() bool { return len(la.q) >= 27 })

	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(e.ctx(4 * time.Second)) }()
	b := e.start(cfgB) // asks a for a lease while a stops
	time.Sleep(1500 * time.Millisecond)
	var late []recordID // published after Stop began
	for i := range 10 {
		sh, seq := e.put(fmt.Sprintf("late%d", i), 0) // on both shards
		late = append(late, recordID{sh, seq})
	}
	if err := <-stopped; err != nil {
		t.Logf("a's Stop: %v", err)
	}
	eventually(t, 10*time.Second, "b reads both shards", func() bool { return slices.Equal(b.Reading(), ids) })
	eventually(t, 10*time.Second, "every record handled", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.by) >= 40
	})
	la.close()
	time.Sleep(300 * time.Millisecond) // a duplicate would be here by now

	log.mu.Lock()
	defer log.mu.Unlock()
	la.mu.Lock()
	for _, id := range late {
		if la.got[id] {
			t.Errorf("record %s/%s, published after a's Stop began, delivered to a", id.shard, id.seq)
		}
	}
	la.mu.Unlock()
	aHandled := 0
	for id, hs := range log.by {
		for _, h := range hs {
			if h.owner == "a" {
				aHandled++
			}
		}
		if len(hs) > 1 {
			var by []string
			for _, h := range hs {
				by = append(by, fmt.Sprintf("%s %v-%v", h.owner, h.start.Sub(began).Round(time.Millisecond), h.end.Sub(began).Round(time.Millisecond)))
			}
			t.Errorf("record %s/%s handled %d times (after a's Stop began): %v", id.shard, id.seq, len(hs), by)
		}
	}
	t.Logf("a handled %d records before it left, %d records handled in all", aHandled, len(log.by))
}

// lateCalls fails the first n calls of one kind as a store answering past
// the call's deadline does (the write has not landed), counting them all.
type lateCalls struct{ n, calls atomic.Int32 }

// late counts a call and reports whether it fails.
func (c *lateCalls) late() bool {
	c.calls.Add(1)
	return c.n.Add(-1) >= 0
}

// lateLeaves fails its first n removals of a member entry.
type lateLeaves struct {
	lease.MemberStore
	lateCalls
}

func (s *lateLeaves) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if s.late() {
		return &lease.Error{Op: "leave", Key: lease.MembersKey(ns), Err: context.DeadlineExceeded}
	}
	return s.MemberStore.Leave(ctx, ns, owner, beat)
}

// lateReleases fails its first n releases.
type lateReleases struct {
	lease.Store
	lateCalls
}

func (s *lateReleases) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if s.late() {
		return lease.Lease{}, &lease.Error{Op: "release", Key: l.Key, Err: context.DeadlineExceeded}
	}
	return s.Store.Release(ctx, l)
}

// stopAfterLateCalls starts cfg's owner on e's one shard, with calls
// failing their first 2, and stops it: Stop must report nothing, having
// sent the late call's kind (what) 3 times.
func stopAfterLateCalls(t *testing.T, e *env, cfg shard.Config, calls *lateCalls, what string) {
	t.Helper()
	calls.n.Store(2)
	a := e.startStopped(cfg)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return len(a.Reading()) == 1 })
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop: %v (after %d %s)", err, calls.calls.Load(), what)
	}
	if n := calls.calls.Load(); n != 3 {
		t.Errorf("%d %s, want the 2 that failed and 1 more", n, what)
	}
}

// A slow (not failed) store at Stop: the removal of the member entry that
// gets no answer within a call's deadline is sent again while Stop's
// final writes have time, so the entry goes and Stop reports nothing.
// (Before, one late answer made Stop fail with "lease leave", and the
// others waited out the failover time for an instance that had left:
// CI, TestLiveHandoffWithFailedReleaseDoesNotStrand on dynalite.)
func TestStopRetriesALateLeave(t *testing.T) {
	e, _ := memEnvIn(t, 1, shard.LivenessPerInstance)
	members := &lateLeaves{MemberStore: e.store.(lease.MemberStore)}
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = memberWrap{Store: e.store, m: members}
	stopAfterLateCalls(t, e, cfg, &members.lateCalls, "removals of the member entry")
	ms, err := e.store.(lease.MemberStore).Members(context.Background(), "test/"+e.stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Owner == "a" {
			t.Fatalf("a's member entry is still there after its Stop: %+v", m)
		}
	}
}

// The same for Stop's releases: one that gets no answer in time is sent
// again, so the lease is free for the next owner at once rather than
// after the failover time, and Stop reports nothing.
func TestStopRetriesALateRelease(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 1, l)
		releases := &lateReleases{Store: e.store}
		cfg := e.config("a", newCollector().sink)
		cfg.Leases = withMembers(releases, e.store)
		stopAfterLateCalls(t, e, cfg, &releases.lateCalls, "releases")
		if o := e.lease(e.shards()[0]).Owner; o != "" {
			t.Fatalf("the lease is %q's after a's Stop, want released", o)
		}
	})
}

// landedReleases lands its first release and answers it as a call past
// its deadline does: the answer is lost, the write is not.
type landedReleases struct {
	lease.Store
	lost, calls atomic.Int32
}

func (s *landedReleases) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	s.calls.Add(1)
	nl, err := s.Store.Release(ctx, l)
	if err == nil && s.lost.CompareAndSwap(0, 1) {
		return lease.Lease{}, &lease.Error{Op: "release", Key: l.Key, Err: context.DeadlineExceeded}
	}
	return nl, err
}

// A release at Stop that landed with its answer lost is found landed by
// the next try: the lease is free, Stop reports nothing, and no lease is
// counted lost (nobody took it: a "leases lost" alert at every deploy on
// a slow store would be a false one).
func TestStopFindsALostReleaseAnswerLanded(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 1, l)
		id := e.shards()[0]
		releases := &landedReleases{Store: e.store}
		cfg := e.config("a", newCollector().sink)
		cfg.Leases, cfg.Counters = withMembers(releases, e.store), new(shard.LeaseCounters)
		a := e.startStopped(cfg)
		eventually(t, 5*time.Second, "a reads the shard", func() bool { return len(a.Reading()) == 1 })
		if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if releases.lost.Load() == 0 {
			t.Fatal("no release answer was lost: the test injected nothing")
		}
		// The release is sent again, unless a renewal found it landed first.
		if n := releases.calls.Load(); n > 2 {
			t.Errorf("%d releases, want the one whose answer was lost and at most 1 more", n)
		}
		if n := cfg.Counters.Lost.Load(); n != 0 {
			t.Errorf("%d leases counted lost after a Stop that released its only one", n)
		}
		if o := e.lease(id).Owner; o != "" {
			t.Fatalf("the lease is %q's after a's Stop, want released", o)
		}
	})
}

// The same in a handoff: the asker may take the lease before the owner
// sends its release again, and finds it handed over, not lost.
func TestHandoffFindsALostReleaseAnswerLanded(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		releases := &landedReleases{Store: e.store}
		cols := newCollectors(2)
		cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
		cfgA.Leases, cfgA.Counters = withMembers(releases, e.store), new(shard.LeaseCounters)
		cfgB.Handoff = time.Hour // b takes only a released lease
		a := e.start(cfgA)
		eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
		b := e.start(cfgB)
		eventually(t, 10*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
		if releases.lost.Load() == 0 {
			t.Fatal("no release answer was lost: the test injected nothing")
		}
		eventually(t, 5*time.Second, "a's handoff over (its release tried again)", func() bool {
			return cfgA.Counters.Lost.Load()+cfgA.Counters.HandedOver.Load() > 0
		})
		if n, h := cfgA.Counters.Lost.Load(), cfgA.Counters.HandedOver.Load(); n != 0 || h != 1 {
			t.Errorf("a counted %d leases lost and %d handed over, want 0 and 1", n, h)
		}
		checkAllRead(t, e, cols, 20)
	})
}
