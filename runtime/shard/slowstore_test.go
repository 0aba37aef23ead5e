package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// slowStore is a lease store whose calls take time on the way in and on the
// way out, as a slow DynamoDB's do: a call lands (is carried out) after in,
// and its answer arrives out later. A call whose deadline ends before it
// lands does nothing; one whose deadline ends after it landed has done its
// work, but its caller is told it failed (a late answer). Both are zero
// until a test sets them.
type slowStore struct {
	lease.Store
	m       lease.MemberStore
	in, out atomic.Int64 // nanoseconds
	// failLanded makes every call that landed answer with an error (a
	// server error after the write was carried out).
	failLanded atomic.Bool
	// late counts the waits that ended more than lateBy after they were
	// due, and the calls set to answer within their deadline that it cut
	// off: on a loaded machine the store's own timers run late, and it is
	// then slower than the test set it to be.
	late atomic.Int64
}

const lateBy = 100 * time.Millisecond

func newSlowStore(s lease.Store) *slowStore {
	m, _ := s.(lease.MemberStore)
	return &slowStore{Store: s, m: m}
}

func (s *slowStore) set(in, out time.Duration) {
	s.in.Store(int64(in))
	s.out.Store(int64(out))
}

// wait waits d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowStore) call(ctx context.Context, op func() error) error {
	in, out := time.Duration(s.in.Load()), time.Duration(s.out.Load())
	if dl, ok := ctx.Deadline(); ok && !time.Now().Add(in+out).After(dl) {
		// Set to answer within its deadline: one cut off by it was made
		// late by the machine (each wait a little late, none by lateBy:
		// 0.4 s calls at a 0.5 s deadline need only 50 ms each).
		defer func() {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				s.late.Add(1)
			}
		}()
	}
	if err := s.wait(ctx, in); err != nil {
		return &lease.Error{Op: "slow store", Err: err} // never landed
	}
	err := op()
	if werr := s.wait(ctx, out); werr != nil {
		return &lease.Error{Op: "slow store", Err: werr} // landed; the answer came too late
	}
	if err == nil && s.failLanded.Load() {
		return &lease.Error{Op: "slow store", Err: errThrottled} // landed; answered with an error
	}
	return err
}

// wait waits d unless ctx ends first, and counts it late when it ended
// more than lateBy after d.
func (s *slowStore) wait(ctx context.Context, d time.Duration) error {
	began := time.Now()
	err := wait(ctx, d)
	if d > 0 && time.Since(began) > d+lateBy {
		s.late.Add(1)
	}
	return err
}

func (s *slowStore) List(ctx context.Context, ns string) (ls []lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { ls, err = s.Store.List(ctx, ns); return err })
	return ls, err
}

func (s *slowStore) Get(ctx context.Context, key string) (l lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { l, err = s.Store.Get(ctx, key); return err })
	return l, err
}

func (s *slowStore) Take(ctx context.Context, l lease.Lease, owner string) (nl lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { nl, err = s.Store.Take(ctx, l, owner); return err })
	return nl, err
}

func (s *slowStore) Renew(ctx context.Context, l lease.Lease) (nl lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { nl, err = s.Store.Renew(ctx, l); return err })
	return nl, err
}

func (s *slowStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (nl lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { nl, err = s.Store.Checkpoint(ctx, l, cp, sub); return err })
	return nl, err
}

func (s *slowStore) Release(ctx context.Context, l lease.Lease) (nl lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { nl, err = s.Store.Release(ctx, l); return err })
	return nl, err
}

func (s *slowStore) RequestHandoff(ctx context.Context, l lease.Lease, to string) (nl lease.Lease, err error) {
	err = s.call(ctx, func() (err error) { nl, err = s.Store.RequestHandoff(ctx, l, to); return err })
	return nl, err
}

func (s *slowStore) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	return s.call(ctx, func() error { return s.m.Heartbeat(ctx, ns, m) })
}

func (s *slowStore) Members(ctx context.Context, ns string) (ms []lease.Member, err error) {
	err = s.call(ctx, func() (err error) { ms, err = s.m.Members(ctx, ns); return err })
	return ms, err
}

func (s *slowStore) Leave(ctx context.Context, ns, owner string, beat int64) error {
	return s.call(ctx, func() error { return s.m.Leave(ctx, ns, owner, beat) })
}

// Issue 29, defect 7: a lease store that answers every call within the
// runtime's own call deadline (Failover/3), however slowly, never fences a
// live owner. (Before the fix the next heartbeat was sent Renew after the
// last one's answer: at 80% of the deadline a call, each landed after the
// fence the one before had set, and the owner fenced its leases every
// cycle while the others saw it alive.)
func TestSlowLeaseStoreWithinTheDeadlineNeverFences(t *testing.T) {
	eachLiveness(t, testSlowLeaseStoreWithinTheDeadlineNeverFences)
}

// On a loaded machine the store's own timers run late, and a call then
// takes longer than the deadline it was set under: as in
// TestHalfThrottledOwnerStaysAlive, a run in which the store's waits ran
// more than lateBy late is run again, up to three times; a fence in a run
// where the store kept its time fails at once.
func testSlowLeaseStoreWithinTheDeadlineNeverFences(t *testing.T, l shard.Liveness) {
	untilOnTime(t, func() (string, int64) { return slowWithinTheDeadlineOnce(t, l) })
}

// untilOnTime runs once (what failed, if anything, and how many of the
// store's waits ran more than lateBy late) up to three times: a failure
// in a run where the store kept its time fails the test at once, one in a
// run where its waits ran late (a loaded machine made the store slower
// than the test set it) is run again.
func untilOnTime(t *testing.T, once func() (failure string, late int64)) {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		failure, late := once()
		switch {
		case failure == "":
			return
		case late == 0 || i == attempts:
			t.Fatalf("%s (%d of the store's waits more than %v late)", failure, late, lateBy)
		}
		t.Logf("attempt %d: %s, with %d of the store's waits more than %v late (slower than the test's store); again", i, failure, late, lateBy)
	}
}

// slowWithinTheDeadlineOnce runs the test once: what failed, if anything,
// and how many of the store's waits ran late meanwhile.
func slowWithinTheDeadlineOnce(t *testing.T, l shard.Liveness) (failure string, late int64) {
	e, _ := memEnvIn(t, 2, l)
	ids := e.shards()
	store := newSlowStore(e.store)
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = store
	// The timing, halved: a 1.5 s failover, a call deadline of
	// 0.5 s, the renewal a third of the failover.
	cfg.Renew, cfg.Failover = 500*time.Millisecond, 1500*time.Millisecond
	cfg.Counters = new(shard.LeaseCounters)
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(c.Reading(), ids) })
	defer func() { // before another attempt starts
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	}()
	store.set(200*time.Millisecond, 200*time.Millisecond) // 0.4 s a call: 80% of the deadline
	store.late.Store(0)
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := cfg.Counters.Lost.Load(); n != 0 {
			return fmt.Sprintf("a fenced %d leases with every call answered within its deadline (reads %v)", n, c.Reading()), store.late.Load()
		}
	}
	if got := c.Reading(); !slices.Equal(got, ids) {
		return fmt.Sprintf("a reads %v, want %v", got, ids), store.late.Load()
	}
	return "", store.late.Load()
}

// pausedReads is a store whose members read, once armed, is answered and
// then held for pause before its caller gets it: the process froze (a GC
// pause, SIGSTOP, a VM) just after the answer arrived. It holds a read
// that shows of watch the beat the read before showed, so that the
// reader's clock for that beat started before the pause.
type pausedReads struct {
	memberWrap
	watch  string
	pause  time.Duration
	armed  atomic.Bool
	paused atomic.Bool
	last   atomic.Int64 // watch's beat in the last answer
}

func (s *pausedReads) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	ms, err := s.memberWrap.Members(ctx, ns)
	if err != nil {
		return ms, err
	}
	for _, m := range ms {
		if m.Owner != s.watch {
			continue
		}
		if s.last.Swap(m.Beat) == m.Beat && s.armed.CompareAndSwap(true, false) {
			time.Sleep(s.pause) // frozen: the answer is read after the thaw
			s.paused.Store(true)
		}
	}
	return ms, nil
}

// Issue 29, defect 6: an instance whose members read was answered just
// before a pause does not judge the others dead by it after the thaw: a
// beat's age is counted to when the read was sent, not to when its answer
// was processed. (Before the fix every beat the read showed unchanged
// looked a pause old, and the paused instance took a live owner's leases.)
//
// (With liveness per lease the take is conditional on the counter the
// listing showed, which a live owner moved during the pause: the take
// fails.)
func TestMembersReadBeforeAPauseTakesNoLiveLease(t *testing.T) {
	e, _ := memEnv(t, 4)
	ids := e.shards()
	m, _ := lease.MembersOf(e.store)
	store := &pausedReads{memberWrap: memberWrap{Store: e.store, m: m}, watch: "b"}
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases = store
	cfgA.Counters, cfgB.Counters = new(shard.LeaseCounters), new(shard.LeaseCounters)
	// b beats every 200 ms, a reads the members every 100 ms or so: some
	// of a's reads show b's beat unchanged.
	cfgA.Renew, cfgA.Failover = 100*time.Millisecond, time.Second
	cfgB.Renew, cfgB.Failover = 200*time.Millisecond, time.Second
	store.pause = 3 * cfgA.Failover
	ca := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return slices.Equal(ca.Reading(), ids) })
	cb := e.start(cfgB)
	eventually(t, 10*time.Second, "a and b read two shards each", func() bool {
		return len(ca.Reading()) == 2 && len(cb.Reading()) == 2
	})
	taken := cfgA.Counters.Taken.Load()
	store.armed.Store(true)
	eventually(t, 10*time.Second, "a's members read paused", store.paused.Load)
	time.Sleep(cfgA.Failover) // a's next passes
	// (b writes nothing at rest: it finds out only at its next write.)
	if n := cfgA.Counters.Taken.Load() - taken; n != 0 {
		var owners []string
		for _, id := range ids {
			owners = append(owners, e.lease(id).Owner)
		}
		t.Fatalf("a took %d leases of b, alive throughout, after its paused members read (owners now %v; b reads %v)", n, owners, cb.Reading())
	}
}

// Issue 29, defect 2: an owner whose lease-store calls land but are
// answered after their deadline (slow, not failed) cannot confirm its
// heartbeats and fences itself; the others must then see it dead, and
// read its shards, within about twice the failover time. (Before the fix
// they saw its beat move with every write that landed and counted it
// alive, so nobody read its shards while the slowness lasted.)
//
// The same holds for calls that land and are answered with an error, and
// for calls that never land (slower than the deadline).
func TestLateAnsweredHeartbeatsLeaveNoShardUnread(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(s *slowStore)
	}{
		{"late", func(s *slowStore) { s.set(0, time.Second) }}, // lands at once, answered after the deadline (1/3 s)
		{"failed", func(s *slowStore) { s.failLanded.Store(true) }},
		{"never", func(s *slowStore) { s.set(time.Second, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testLateAnsweredHeartbeatsLeaveNoShardUnread(t, tc.set) })
	}
}

func testLateAnsweredHeartbeatsLeaveNoShardUnread(t *testing.T, slow func(*slowStore)) {
	e, _ := memEnv(t, 4)
	ids := e.shards()
	store := newSlowStore(e.store)
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases = store
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, time.Second
	}
	ca := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return slices.Equal(ca.Reading(), ids) })
	cb := e.start(cfgB)
	eventually(t, 10*time.Second, "a and b read two shards each", func() bool {
		return len(ca.Reading()) == 2 && len(cb.Reading()) == 2
	})
	slow(store)
	late := time.Now()
	for {
		aReads, bReads := ca.Reading(), cb.Reading()
		for _, id := range aReads {
			if slices.Contains(bReads, id) {
				t.Fatalf("a and b both read %s", id)
			}
		}
		if len(bReads) == len(ids) && len(aReads) == 0 {
			t.Logf("b reads every shard %v after a's answers turned late", time.Since(late).Round(time.Millisecond))
			return
		}
		if time.Since(late) > 2*cfgA.Failover+cfgA.Failover/2 {
			t.Fatalf("%v after a's answers turned late: a reads %v, b %v; want b to read all", time.Since(late).Round(time.Millisecond), aReads, bReads)
		}
		time.Sleep(time.Millisecond)
	}
}

// Issue 29, defect 5: after a pause longer than the fence time (here: a
// slow handler while nothing of the owner's lands, and fence timers that
// run late, as they may after SIGCONT), no record waiting in a lane is
// handed to a handler: Record.Stale reads the monotonic clock against the
// lease's fence itself. The handler's Lease context ends once the fence
// has run. (Before the fix Stale read a flag that only the fence's timer
// set: every record queued behind the slow one went to the handler after
// another instance had taken the shard.)
func TestPausedOwnerHandsNoRecordOutPastItsLease(t *testing.T) {
	restore := shard.DelayFences(2 * time.Second)
	defer restore()
	e, _ := memEnv(t, 1)
	ids := e.shards()
	store := newSlowStore(e.store)
	queue, sink := laneQueue()
	cfgA, cfgB := e.config("a", sink), e.config("b", newCollector().sink)
	cfgA.Leases = store
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, time.Second
	}
	ca := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return slices.Equal(ca.Reading(), ids) })
	e.publish(map[string]int{}, 20, 4)
	first := <-queue
	// The slow handler runs on the first record; meanwhile nothing of a
	// reaches the store (a pause, to the others), and b takes the shard.
	store.set(time.Hour, 0)
	cb := e.start(cfgB)
	eventually(t, 5*time.Second, "b takes the shard", func() bool { return slices.Equal(cb.Reading(), ids) })
	first.Settle()
	if len(queue) == 0 {
		t.Fatal("no record waits behind the slow one; the test means some to")
	}
	for n := len(queue); n > 0; n-- {
		if r := <-queue; !r.Stale() {
			t.Fatalf("record %s/%s handed to a's handler after b took the shard (its lease fenced by the clock, its timer not yet run)", r.ShardID, r.SequenceNumber)
		}
	}
	eventually(t, 5*time.Second, "the handler's lease context ends", func() bool { return first.Lease().Err() != nil })
}

// halfThrottled refuses every other heartbeat, checkpoint and members
// read, without carrying it out (a throttled DynamoDB).
type halfThrottled struct {
	*slowStore
	on                      atomic.Bool
	beats, writes, readings atomic.Int64
}

func (s *halfThrottled) throttled(calls *atomic.Int64) bool {
	return s.on.Load() && calls.Add(1)%2 == 0
}

func (s *halfThrottled) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if s.throttled(&s.beats) {
		return &lease.Error{Op: "heartbeat", Err: errThrottled}
	}
	return s.slowStore.Heartbeat(ctx, ns, m)
}

func (s *halfThrottled) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	if s.throttled(&s.writes) {
		return lease.Lease{}, &lease.Error{Op: "checkpoint", Err: errThrottled}
	}
	return s.slowStore.Checkpoint(ctx, l, cp, sub)
}

func (s *halfThrottled) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if s.throttled(&s.readings) {
		return nil, &lease.Error{Op: "members", Err: errThrottled}
	}
	return s.slowStore.Members(ctx, ns)
}

// Issue 29, defect 2's rule seen from the other side: an owner half of
// whose lease calls are throttled, and the rest slow, confirms enough
// heartbeats to stay alive: it is never fenced, and the others never take
// its shards. Slow here is 0.2 s a call, within the 0.5 s deadline; under
// CI load the store's own timers ran up to 0.5 s late (a call of 0.6 s and
// more), and with every other call throttled one such call leaves the
// owner no heartbeat before its fence: it rightly fences itself then. A
// run in which the store's waits ran more than lateBy late is run again,
// up to three times; a loss in a run where the store kept its time fails
// at once.
func TestHalfThrottledOwnerStaysAlive(t *testing.T) {
	untilOnTime(t, func() (string, int64) { return halfThrottledOnce(t) })
}

// halfThrottledOnce runs the test once: what failed, if anything, and
// how many of the store's waits ran late meanwhile.
func halfThrottledOnce(t *testing.T) (failure string, late int64) {
	e, _ := memEnv(t, 4)
	store := &halfThrottled{slowStore: newSlowStore(e.store)}
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases = store
	cfgA.Counters, cfgB.Counters = new(shard.LeaseCounters), new(shard.LeaseCounters)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 300*time.Millisecond, 1500*time.Millisecond
	}
	ca := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return len(ca.Reading()) == 4 })
	cb := e.start(cfgB)
	eventually(t, 10*time.Second, "a and b read two shards each", func() bool {
		return len(ca.Reading()) == 2 && len(cb.Reading()) == 2
	})
	defer func() { // before another attempt starts (and again at the test's end)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = ca.Stop(ctx), cb.Stop(ctx)
	}()
	lost, taken := cfgA.Counters.Lost.Load(), cfgB.Counters.Taken.Load()
	store.set(100*time.Millisecond, 100*time.Millisecond)
	store.late.Store(0)
	store.on.Store(true)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := cfgA.Counters.Lost.Load() - lost; n != 0 {
			return fmt.Sprintf("a, half its calls throttled, lost %d leases (a reads %v, b %v)", n, ca.Reading(), cb.Reading()), store.late.Load()
		}
		if n := cfgB.Counters.Taken.Load() - taken; n != 0 {
			return fmt.Sprintf("b took %d of a's leases while a was alive", n), store.late.Load()
		}
	}
	return "", store.late.Load()
}

// Issue 29, defect 7 (fleettest/dst mix slowstore, seed 9): leases taken
// while a slow heartbeat is in flight are renewed by that heartbeat when it
// lands. (Before, a heartbeat renewed only the leases held when it was
// sent: the leases an instance took at its start, with its first heartbeat
// in flight, kept a fence counted from no heartbeat and were fenced while
// every call was answered within its deadline.)
func TestLeasesTakenDuringASlowHeartbeatAreRenewedByIt(t *testing.T) {
	e, _ := memEnvIn(t, 2, shard.LivenessPerInstance)
	ids := e.shards()
	store := newSlowStore(e.store)
	// 0.6 s a call, from the start: 60% of the 1 s deadline. (At 90% of a
	// 0.5 s one, a loaded -race run pushed Start's own calls past it; and
	// the fence, 2.4 s after a beat, stays clear of a lagging renewal.)
	store.set(100*time.Millisecond, 500*time.Millisecond)
	beats := &beatGaps{slowStore: store}
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = beats
	cfg.Renew, cfg.Failover = time.Second, 3*time.Second
	cfg.Counters = new(shard.LeaseCounters)
	c := e.newCoordinator(cfg)
	if err := c.Start(e.ctx(30 * time.Second)); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// A loaded -race run delayed a 0.6 s call past its 1 s
			// deadline: the premise (every call answered in time) broke.
			t.Skipf("Start: %v (a store call late under load)", err)
		}
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	time.Sleep(8 * time.Second)
	if n := cfg.Counters.Lost.Load(); n != 0 {
		// The fence is a's own, 2.4 s (Failover less a fifth) after a
		// beat was sent: legitimate only when no beat was sent and
		// answered in that time, which a loaded -race run can do.
		gap, failed := beats.worst()
		if failed == 0 && gap < 2400*time.Millisecond {
			t.Fatalf("a fenced %d leases with every heartbeat answered, at most %v apart (reads %v)", n, gap.Round(time.Millisecond), c.Reading())
		}
		t.Logf("a fenced %d leases after a heartbeat gap of %v (%d failed): a lagging run, not the defect", n, gap.Round(time.Millisecond), failed)
	}
	// Fenced or not, a reads both shards: it takes back what it fenced.
	eventually(t, 3*cfg.Failover, "a reads both shards", func() bool { return slices.Equal(c.Reading(), ids) })
}

// beatGaps records the longest time between the sendings of two
// successful heartbeats, and how many heartbeats failed.
type beatGaps struct {
	*slowStore
	mu       sync.Mutex
	lastSent time.Time
	gap      time.Duration
	failed   int
}

func (b *beatGaps) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	sent := time.Now()
	err := b.slowStore.Heartbeat(ctx, ns, m)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failed++
		return err
	}
	if !b.lastSent.IsZero() {
		b.gap = max(b.gap, sent.Sub(b.lastSent))
	}
	b.lastSent = sent
	return nil
}

func (b *beatGaps) worst() (time.Duration, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gap, b.failed
}

// lateTakes answers the first n takes with an error after they landed (a
// deadline that ran out on the answer's way back).
type lateTakes struct {
	*slowStore
	n atomic.Int64
}

func (s *lateTakes) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	nl, err := s.slowStore.Take(ctx, l, owner)
	if err == nil && s.n.Add(-1) >= 0 {
		return lease.Lease{}, &lease.Error{Op: "late store", Err: context.DeadlineExceeded}
	}
	return nl, err
}

// Issue 29, defect 2 leftover (fleettest/dst mix late, seed 61): a take
// that landed but was answered with an error is read back on a later pass
// and the shard read, not left under this owner's name unread until the
// others judge it dead.
func TestTakeAnsweredLateIsReadBack(t *testing.T) {
	eachLiveness(t, testTakeAnsweredLateIsReadBack)
}

func testTakeAnsweredLateIsReadBack(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	ids := e.shards()
	store := &lateTakes{slowStore: newSlowStore(e.store)}
	store.n.Store(2)
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = store
	cfg.Renew, cfg.Failover = 500*time.Millisecond, 1500*time.Millisecond
	c := e.start(cfg)
	eventually(t, 3*time.Second, "a reads both shards", func() bool { return slices.Equal(c.Reading(), ids) })
}

// Issue 29, defect 2 (seed 61 of the simulator's late mix): an owner whose
// lease-store writes land but are answered late fences itself at its fence
// time, fenceAfter (Failover less a fifth) after its last confirmed beat
// was sent; its last beat landed after that send, and the others judge a
// beat by when they first saw it, so by the beat alone they saw it alive
// until at least a failover time after its answers turned late. Its
// heartbeats past the fence say it is fenced (lease.Member.Fenced), and
// the others read its shards within the failover time. (Before, b read
// them no earlier than the failover time after a's answers turned late.)
func TestLateAnsweredOwnerIsSeenFencedAtItsFence(t *testing.T) {
	e, _ := memEnv(t, 4)
	ids := e.shards()
	store := newSlowStore(e.store)
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases = store
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, 3*time.Second
	}
	ca := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return slices.Equal(ca.Reading(), ids) })
	cb := e.start(cfgB)
	eventually(t, 10*time.Second, "a and b read two shards each", func() bool {
		return len(ca.Reading()) == 2 && len(cb.Reading()) == 2
	})
	store.set(0, time.Minute) // every call lands at once and is answered after its deadline
	late := time.Now()
	for {
		aReads, bReads := ca.Reading(), cb.Reading()
		for _, id := range aReads {
			if slices.Contains(bReads, id) {
				t.Fatalf("a and b both read %s", id)
			}
		}
		if len(bReads) == len(ids) && len(aReads) == 0 {
			took := time.Since(late)
			t.Logf("b reads every shard %v after a's answers turned late (failover %v)", took.Round(time.Millisecond), cfgA.Failover)
			if took >= cfgA.Failover {
				t.Fatalf("b read a's shards %v after a's answers turned late; want within the failover time %v (a fences %v after its last confirmed beat and says so)",
					took.Round(time.Millisecond), cfgA.Failover, cfgA.Failover*4/5)
			}
			break
		}
		if time.Since(late) > 3*cfgA.Failover {
			t.Fatalf("%v after a's answers turned late: a reads %v, b %v; want b to read all", time.Since(late).Round(time.Millisecond), aReads, bReads)
		}
		time.Sleep(time.Millisecond)
	}
	ms, err := store.m.Members(e.ctx(5*time.Second), cfgA.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Owner == "a" && !m.Fenced {
			t.Errorf("a's member entry %+v does not say it is fenced", m)
		}
	}
}

// laneQueue returns a sink that queues every record it is given, as a lane
// does, for the test to hand to its handler.
func laneQueue() (chan shard.Record, shard.Sink) {
	queue := make(chan shard.Record, 1000)
	return queue, func(_ context.Context, rs []shard.Record) (int, error) {
		for _, r := range rs {
			queue <- r
		}
		return len(rs), nil
	}
}
