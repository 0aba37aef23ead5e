package dst

import (
	"context"
	"errors"
	"hash/fnv"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

var (
	// errDead is what a crashed instance's Kinesis calls fail with: an
	// invalid argument, which the runtime does not retry in a loop.
	errDead = &types.InvalidArgumentException{Message: aws.String("dst: instance crashed")}
	// errStoreDead, errStoreDown and errThrottled are its lease-store
	// failures: crashed, an outage, throttling.
	errStoreDead = errors.New("dst: instance crashed")
	errStoreDown = errors.New("dst: lease store unavailable")
	errThrottled = errors.New("dst: lease store throttled (ProvisionedThroughputExceeded)")
	errKinesis   = &types.KMSThrottlingException{Message: aws.String("dst: injected Kinesis failure")}
)

// faults is the state of one instance's injected faults, guarded by
// world.mu; times are virtual.
type faults struct {
	resume       chan struct{} // non-nil while paused: closed when the pause ends
	pausedAt     time.Time
	resumedAt    time.Time
	memberPause  time.Duration // PauseAfterMembers, armed
	slowUntil    time.Time
	slowLat      time.Duration
	lateUntil    time.Time
	failUntil    time.Time
	failThrottle bool
	kinUntil     time.Time
	kinThrottle  bool
	kinSlowUntil time.Time
	kinSlowLat   time.Duration
	kinHangUntil time.Time
	hangUntil    time.Time // StoreHang
}

// membersAnswered starts an armed PauseAfterMembers when the answer shows
// another member's beat where the last answer showed it: the reader's
// clock for that beat then started before the pause.
func (in *instance) membersAnswered(ms []lease.Member) {
	w := in.w
	w.mu.Lock()
	unchanged := ""
	for _, m := range ms {
		if m.Owner != in.name && in.lastBeats[m.Owner] == m.Beat {
			unchanged = m.Owner
		}
	}
	if in.lastBeats == nil {
		in.lastBeats = map[string]int64{}
	}
	for _, m := range ms {
		in.lastBeats[m.Owner] = m.Beat
	}
	d := in.f.memberPause
	if d > 0 && unchanged != "" {
		in.f.memberPause = 0
		if in.stopping { // see pause
			w.noteLocked("%s: members read answered (%s's beat unchanged); pause for %v not applied (shutting down)", in.name, unchanged, d)
			d = 0
		} else {
			w.noteLocked("%s: members read answered (%s's beat unchanged), then paused for %v", in.name, unchanged, d)
		}
	} else {
		d = 0
	}
	w.mu.Unlock()
	if d > 0 {
		in.pause(d)
	}
}

// thawing reports whether in resumed from a pause at this very instant
// of virtual time.
func (in *instance) thawing() bool {
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	return !in.f.resumedAt.IsZero() && time.Now().Equal(in.f.resumedAt)
}

// markBad notes a lease-store call that failed or was answered late.
func (in *instance) markBad() {
	in.w.mu.Lock()
	in.bad = time.Now()
	in.w.mu.Unlock()
}

// gate blocks while in is paused. The channel was made in the bubble, so
// the wait is durable and virtual time runs on.
func (in *instance) gate() {
	for {
		in.w.mu.Lock()
		ch := in.f.resume
		in.w.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
		in.markBad() // a frozen process's calls count as late
	}
}

// pause freezes in for d (from now); a pause already running is extended.
// An instance whose shutdown has begun is not paused: the simulation
// freezes its calls, not its Stop, which would wait for a pass frozen at
// a gate while holding the pass mutex, a sync.Mutex, on which a goroutine
// is not durably blocked: the bubble's clock stopped and the pause never
// ended (mix all, seed 137 of a hunt). A real freeze stops Stop too.
func (in *instance) pause(d time.Duration) {
	w := in.w
	w.mu.Lock()
	if in.stopping {
		w.noteLocked("%s: pause for %v not applied (shutting down)", in.name, d)
		w.mu.Unlock()
		return
	}
	if in.f.resume == nil {
		in.f.resume = make(chan struct{})
		in.f.pausedAt = time.Now()
	}
	ch := in.f.resume
	w.pauses = append(w.pauses, span{inst: in.name, from: time.Now(), to: time.Now().Add(d)})
	w.mu.Unlock()
	time.AfterFunc(d, func() {
		w.mu.Lock()
		if in.f.resume == ch {
			in.f.resume = nil
			in.f.resumedAt = time.Now()
			close(ch)
		}
		w.mu.Unlock()
	})
}

// storeOp classes: whether the runtime may hold a lease's mutex while it
// waits for the call (a checkpoint, renewal, release, children write, a
// take back of a kept lease, a re-read of a lease that moved).
// Such a call is never made to wait on the virtual clock: a goroutine
// waiting for a sync.Mutex is not durably blocked, so a sleep under the
// mutex stops the bubble's clock for good. Their slow and late answers
// come at once.
type opClass struct {
	name     string
	write    bool
	underMu  bool
	isMember bool // a members read
}

var (
	opList       = opClass{name: "list"}
	opGet        = opClass{name: "get", underMu: true} // mutate re-reads a lease under its mutex
	opGetMany    = opClass{name: "get-many"}
	opMembers    = opClass{name: "members", isMember: true}
	opRoster     = opClass{name: "roster"}
	opByOwner    = opClass{name: "members-by-owner"}
	opBump       = opClass{name: "roster-bump", write: true}
	opDeclare    = opClass{name: "declare-dead", write: true}
	opNotice     = opClass{name: "roster-notice", write: true}
	opCreate     = opClass{name: "create", write: true}
	opTake       = opClass{name: "take", write: true, underMu: true} // keep takes back under the mutex
	opHandoff    = opClass{name: "handoff", write: true}
	opDelete     = opClass{name: "delete", write: true}
	opHeartbeat  = opClass{name: "heartbeat", write: true}
	opLeave      = opClass{name: "leave", write: true}
	opRenew      = opClass{name: "renew", write: true, underMu: true}
	opCheckpoint = opClass{name: "checkpoint", write: true, underMu: true}
	opRelease    = opClass{name: "release", write: true, underMu: true}
	opChildren   = opClass{name: "set-children", write: true, underMu: true}
)

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// storeCall runs apply as one of in's lease-store calls, through its
// faults.
func storeCall[T any](ctx context.Context, in *instance, op opClass, apply func(context.Context) (T, error)) (T, error) {
	var zero T
	if op == opHeartbeat && in.w.cfg.Mix.HeartbeatsUnderMu {
		op.underMu = true
	}
	if op.underMu {
		// Under a lease's mutex a call cannot wait at the gate (see
		// opClass): while paused it fails as a call sent just before a
		// freeze does when the process runs again, past its deadline,
		// without having reached the store.
		in.w.mu.Lock()
		paused := in.f.resume != nil
		in.w.mu.Unlock()
		if paused {
			in.markBad()
			return zero, context.DeadlineExceeded
		}
	} else {
		in.gate()
	}
	if in.dead.Load() {
		return zero, errStoreDead
	}
	now := time.Now()
	in.w.mu.Lock()
	f := in.f
	in.w.mu.Unlock()
	if now.Before(f.failUntil) {
		in.markBad()
		if f.failThrottle {
			return zero, errThrottled
		}
		return zero, errStoreDown
	}
	if now.Before(f.hangUntil) {
		// Lost on the way: not applied, never answered (at once under a
		// lease's mutex, as a late answer, see opClass).
		in.markBad()
		if done := ctx.Done(); !op.underMu && done != nil {
			<-done
		}
		return zero, context.DeadlineExceeded
	}
	if now.Before(f.slowUntil) && !op.underMu {
		if err := sleepCtx(ctx, f.slowLat); err != nil {
			in.markBad()
			return zero, err
		}
	}
	// The caller's context: a late answer comes when its deadline passes
	// (at once for a call made as the process thaws, whose deadline
	// passed during the pause; the context the call runs under then has
	// none, and waiting on it blocked the call for ever: a beat made so
	// hung its instance's Shutdown, mix all seed 1796542182813609903).
	sent := ctx
	if in.thawing() {
		// The process has just resumed: its deadlines' timers fired
		// during the pause in virtual time, but a thawed process's
		// goroutines race them, and a call made before they run goes
		// out.
		ctx = context.WithoutCancel(ctx)
	}
	if err := ctx.Err(); err != nil {
		in.markBad()
		return zero, err
	}
	v, err := apply(ctx)
	if op.write && now.Before(f.lateUntil) {
		defer in.markBad()
		// Applied, answered after the deadline.
		if done := sent.Done(); !op.underMu && done != nil {
			<-done
		}
		return zero, context.DeadlineExceeded
	}
	if op.isMember {
		if ms, ok := any(v).([]lease.Member); ok && err == nil {
			in.membersAnswered(ms)
		}
	}
	if !op.underMu {
		in.gate()
	}
	return v, err
}

// store is one instance's client of the shared lease store.
type store struct {
	m  *lease.Memory
	in *instance
}

func (s *store) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	return storeCall(ctx, s.in, opList, func(ctx context.Context) ([]lease.Lease, error) { return s.m.List(ctx, ns) })
}
func (s *store) Get(ctx context.Context, key string) (lease.Lease, error) {
	return storeCall(ctx, s.in, opGet, func(ctx context.Context) (lease.Lease, error) { return s.m.Get(ctx, key) })
}
func (s *store) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	return storeCall(ctx, s.in, opGetMany, func(ctx context.Context) ([]lease.Lease, error) { return s.m.GetMany(ctx, keys) })
}
func (s *store) Create(ctx context.Context, l lease.Lease) (bool, error) {
	return storeCall(ctx, s.in, opCreate, func(ctx context.Context) (bool, error) { return s.m.Create(ctx, l) })
}

type created struct {
	l  lease.Lease
	ok bool
}

func (s *store) CreateOrGet(ctx context.Context, l lease.Lease) (lease.Lease, bool, error) {
	c, err := storeCall(ctx, s.in, opCreate, func(ctx context.Context) (created, error) {
		l, ok, err := s.m.CreateOrGet(ctx, l)
		return created{l, ok}, err
	})
	return c.l, c.ok, err
}
func (s *store) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	return storeCall(ctx, s.in, opTake, func(ctx context.Context) (lease.Lease, error) {
		nl, err := s.m.Take(ctx, l, owner)
		if err == nil && l.Owner != owner {
			s.in.w.took(owner, l.Owner, l.ShardID)
		}
		return nl, err
	})
}
func (s *store) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	return storeCall(ctx, s.in, opRenew, func(ctx context.Context) (lease.Lease, error) { return s.m.Renew(ctx, l) })
}
func (s *store) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	return storeCall(ctx, s.in, opCheckpoint, func(ctx context.Context) (lease.Lease, error) {
		nl, err := s.m.Checkpoint(ctx, l, cp, sub)
		if err == nil {
			w := s.in.w
			w.mu.Lock()
			w.checkpoints[s.in.name] = append(w.checkpoints[s.in.name], cpWrite{shard: l.ShardID, cp: cp, at: time.Now()})
			w.mu.Unlock()
		}
		return nl, err
	})
}
func (s *store) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	return storeCall(ctx, s.in, opRelease, func(ctx context.Context) (lease.Lease, error) {
		nl, err := s.m.Release(ctx, l)
		if err == nil {
			w := s.in.w
			w.mu.Lock()
			w.releases[s.in.name] = append(w.releases[s.in.name], shardAt{l.ShardID, time.Now()})
			w.noteLocked("%s released %s (to %s)", s.in.name, l.ShardID, orNobody(nl.Owner))
			w.mu.Unlock()
		}
		return nl, err
	})
}
func (s *store) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	return storeCall(ctx, s.in, opHandoff, func(ctx context.Context) (lease.Lease, error) {
		nl, err := s.m.RequestHandoff(ctx, l, to)
		if err == nil {
			s.in.w.note("%s asked %s for %s", to, l.Owner, l.ShardID)
		}
		return nl, err
	})
}
func (s *store) SetChildren(ctx context.Context, l lease.Lease, children []string) (lease.Lease, error) {
	return storeCall(ctx, s.in, opChildren, func(ctx context.Context) (lease.Lease, error) { return s.m.SetChildren(ctx, l, children) })
}
func (s *store) Delete(ctx context.Context, l lease.Lease) error {
	_, err := storeCall(ctx, s.in, opDelete, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.m.Delete(ctx, l) })
	return err
}
func (s *store) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	_, err := storeCall(ctx, s.in, opHeartbeat, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.m.Heartbeat(ctx, ns, m) })
	return err
}
func (s *store) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	return storeCall(ctx, s.in, opMembers, func(ctx context.Context) ([]lease.Member, error) { return s.m.Members(ctx, ns) })
}
func (s *store) Leave(ctx context.Context, ns, owner string, beat int64) error {
	_, err := storeCall(ctx, s.in, opLeave, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.m.Leave(ctx, ns, owner, beat) })
	return err
}

func (s *store) RosterVersion(ctx context.Context, ns string) (int64, error) {
	return storeCall(ctx, s.in, opRoster, func(ctx context.Context) (int64, error) { return s.m.RosterVersion(ctx, ns) })
}
func (s *store) BumpRoster(ctx context.Context, ns string) (int64, error) {
	return storeCall(ctx, s.in, opBump, func(ctx context.Context) (int64, error) { return s.m.BumpRoster(ctx, ns) })
}

type versioned struct {
	v  int64
	ms []lease.Member
	ns []lease.RosterNotice
}

func (s *store) WatchRoster(ctx context.Context, ns string, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	r, err := storeCall(ctx, s.in, opByOwner, func(ctx context.Context) (versioned, error) {
		v, ms, notices, err := s.m.WatchRoster(ctx, ns, owners)
		return versioned{v, ms, notices}, err
	})
	return r.v, r.ms, r.ns, err
}
func (s *store) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	_, err := storeCall(ctx, s.in, opNotice, func(ctx context.Context) (struct{}, error) {
		err := s.m.PostNotice(ctx, ns, n)
		if err == nil {
			s.in.w.note("%s posted a notice of %s at beat %d, due in %v", s.in.name, n.Owner, n.Beat, n.Due)
		}
		return struct{}{}, err
	})
	return err
}
func (s *store) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	_, err := storeCall(ctx, s.in, opNotice, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.m.WithdrawNotice(ctx, ns, n)
	})
	return err
}

func (s *store) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	r, err := storeCall(ctx, s.in, opByOwner, func(ctx context.Context) (versioned, error) {
		v, ms, err := s.m.MembersByOwner(ctx, ns, owners)
		return versioned{v: v, ms: ms}, err
	})
	return r.v, r.ms, err
}
func (s *store) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	_, err := storeCall(ctx, s.in, opDeclare, func(ctx context.Context) (struct{}, error) {
		err := s.m.DeclareDead(ctx, ns, owner, beat)
		if err == nil {
			s.in.w.note("%s declared %s dead at beat %d", s.in.name, owner, beat)
		}
		return struct{}{}, err
	})
	return err
}

var (
	_ lease.RosterNotices  = (*store)(nil)
	_ lease.Store          = (*store)(nil)
	_ lease.MemberStore    = (*store)(nil)
	_ lease.Lookup         = (*store)(nil)
	_ lease.CreateOrGetter = (*store)(nil)
)

// client is one instance's Kinesis client.
type client struct {
	kinesisapi.API
	w interface {
		WaitForRecords(context.Context, string) error
	}
	in *instance
}

// readCall applies in's pause, crash and Kinesis faults to a read, whose
// answer takes lat to arrive.
func readCall[T any](ctx context.Context, in *instance, lat time.Duration, apply func() (T, error)) (T, error) {
	var zero T
	f, err := in.callStart()
	if err != nil {
		return zero, err
	}
	if err := f.readFailure(); err != nil {
		return zero, err
	}
	v, err := slowCall(ctx, in, f, lat, apply)
	in.gate()
	return v, err
}

// readFailure is the KinesisFail error of a read made now under f, or nil.
func (f faults) readFailure() error {
	if time.Now().Before(f.kinUntil) {
		if f.kinThrottle {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("dst: injected throttling")}
		}
		return errKinesis
	}
	return nil
}

// kinesisFault is the error of a Kinesis read of in made now: crashed or
// failing (KinesisFail), or nil.
func (in *instance) kinesisFault() error {
	f, err := in.faultsNow()
	if err != nil {
		return err
	}
	return f.readFailure()
}

// slowCall makes a Kinesis call of in under its KinesisHang and
// KinesisSlow faults (f): never answered (it waits for its caller's
// deadline), or answered late, the server's answer fixed when the call
// arrived. Its answer takes lat to arrive besides; a read frozen on its
// way back (a pause meanwhile) arrives at the thaw.
func slowCall[T any](ctx context.Context, in *instance, f faults, lat time.Duration, apply func() (T, error)) (T, error) {
	var zero T
	if time.Now().Before(f.kinHangUntil) {
		<-ctx.Done()
		in.gate()
		return zero, ctx.Err()
	}
	slow := time.Now().Before(f.kinSlowUntil)
	v, err := apply()
	if lat > 0 {
		_ = sleepCtx(ctx, lat)
	}
	if slow && sleepCtx(ctx, f.kinSlowLat) != nil {
		v, err = zero, ctx.Err()
	}
	if lat > 0 || slow {
		in.gate()
	}
	return v, err
}

// metaCall applies in's pause, crash, and slow and hanging Kinesis faults
// to a call about the stream (not a read: KinesisFail spares it).
func metaCall[T any](ctx context.Context, in *instance, apply func() (T, error)) (T, error) {
	f, err := in.callStart()
	if err != nil {
		var zero T
		return zero, err
	}
	return slowCall(ctx, in, f, 0, apply)
}

// callStart begins a Kinesis call of in: it waits out a pause, fails with
// errDead once in crashed, and returns in's faults as they stand.
func (in *instance) callStart() (faults, error) {
	in.gate()
	return in.faultsNow()
}

// faultsNow returns in's faults as they stand, or errDead once in crashed.
func (in *instance) faultsNow() (faults, error) {
	if in.dead.Load() {
		return faults{}, errDead
	}
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	return in.f, nil
}

// latency is how long an answer to in about shard travels: under 0.1 ms,
// and other for each instance and shard, so that an instance's readers
// opened at one instant, or woken by one change of the stream, do not
// go on at one instant, where the order they run in would be the Go
// scheduler's (see "What may vary"). Only readers' calls wait so (no
// reader holds a mutex across them: a wait on the virtual clock under a
// sync.Mutex stops the bubble's clock, see opClass).
func (in *instance) latency(shard string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(in.name + "/" + shard))
	return time.Duration(1+h.Sum32()%997) * 100 * time.Nanosecond
}

// iteratorShard returns the shard of an iterator handed out ("" unknown).
func (w *world) iteratorShard(it *string) string {
	if it == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.iterShard[*it]
}

// foreignCopy reports whether data is a retry copy made by an application
// other than app: one app's runtime skips another's copies unhandled.
func foreignCopy(data []byte, app string) bool {
	h, _, err := runtime.DecodeRecord(data)
	if err != nil {
		return false
	}
	a, ok := h[runtime.ApplicationHeader]
	return ok && a != app
}

// noteForeignLocked notes a fetch by inst of k (shard/sequence), a retry
// copy of another application; w.mu is held.
func (w *world) noteForeignLocked(inst, k string) {
	f := w.foreign[inst]
	if f == nil {
		f = map[string][]time.Time{}
		w.foreign[inst] = f
	}
	f[k] = append(f[k], time.Now())
}

// fetchedLocked notes records of shard as got by in now (see
// checkUnread); w.mu is held.
func (in *instance) fetchedLocked(shard string, records []types.Record) {
	w := in.w
	f := w.fetched[in.name]
	if f == nil {
		f = map[string][]time.Time{}
		w.fetched[in.name] = f
	}
	for _, r := range records {
		if r.SequenceNumber != nil {
			k := shard + "/" + *r.SequenceNumber
			f[k] = append(f[k], time.Now())
			if foreignCopy(r.Data, in.ns) {
				w.noteForeignLocked(in.name, k)
			}
		}
	}
}

func (c *client) GetRecords(ctx context.Context, p *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	var lat time.Duration
	if id := c.in.w.iteratorShard(p.ShardIterator); id != "" {
		lat = c.in.latency(id)
	}
	out, err := readCall(ctx, c.in, lat, func() (*kinesis.GetRecordsOutput, error) { return c.API.GetRecords(ctx, p, o...) })
	if err == nil && p.ShardIterator != nil {
		// The records of the answer, as its reader got it (after a pause
		// that fell on it), are fetched (see checkUnread).
		w := c.in.w
		w.mu.Lock()
		if id := w.iterShard[*p.ShardIterator]; id != "" {
			c.in.fetchedLocked(id, out.Records)
			if out.NextShardIterator != nil {
				w.iterShard[*out.NextShardIterator] = id
			}
		}
		w.mu.Unlock()
	}
	return out, err
}

func (c *client) GetShardIterator(ctx context.Context, p *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := readCall(ctx, c.in, 0, func() (*kinesis.GetShardIteratorOutput, error) { return c.API.GetShardIterator(ctx, p, o...) })
	if err == nil && out.ShardIterator != nil && p.ShardId != nil {
		c.in.w.mu.Lock()
		c.in.w.iterShard[*out.ShardIterator] = *p.ShardId
		c.in.w.mu.Unlock()
	}
	return out, err
}

func (c *client) ListShards(ctx context.Context, p *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return metaCall(ctx, c.in, func() (*kinesis.ListShardsOutput, error) { return c.API.ListShards(ctx, p, o...) })
}

func (c *client) DescribeStreamSummary(ctx context.Context, p *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return metaCall(ctx, c.in, func() (*kinesis.DescribeStreamSummaryOutput, error) { return c.API.DescribeStreamSummary(ctx, p, o...) })
}

func (c *client) DescribeStreamConsumer(ctx context.Context, p *kinesis.DescribeStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return metaCall(ctx, c.in, func() (*kinesis.DescribeStreamConsumerOutput, error) {
		return c.API.DescribeStreamConsumer(ctx, p, o...)
	})
}

func (c *client) RegisterStreamConsumer(ctx context.Context, p *kinesis.RegisterStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return metaCall(ctx, c.in, func() (*kinesis.RegisterStreamConsumerOutput, error) {
		return c.API.RegisterStreamConsumer(ctx, p, o...)
	})
}

func (c *client) ListStreamConsumers(ctx context.Context, p *kinesis.ListStreamConsumersInput, o ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	return metaCall(ctx, c.in, func() (*kinesis.ListStreamConsumersOutput, error) { return c.API.ListStreamConsumers(ctx, p, o...) })
}

func (c *client) WaitForRecords(ctx context.Context, it string) error {
	c.in.gate()
	if c.in.dead.Load() {
		_ = sleepCtx(ctx, time.Second)
		return errDead
	}
	err := c.w.WaitForRecords(ctx, it)
	if id := c.in.w.iteratorShard(&it); id != "" && ctx.Err() == nil {
		_ = sleepCtx(ctx, c.in.latency(id))
	}
	return err
}

func orNobody(s string) string {
	if s == "" {
		return "nobody"
	}
	return s
}

// SubscribeToShard is a read (readCall) whose events then reach the
// runtime through events: each waits at in's gate and takes in's latency
// for the shard, and its records are fetched as GetRecords' are.
func (c *client) SubscribeToShard(ctx context.Context, p *kinesis.SubscribeToShardInput, o ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	shard := aws.ToString(p.ShardId)
	out, err := readCall(ctx, c.in, c.in.latency(shard), func() (*kinesis.SubscribeToShardOutput, error) { return c.API.SubscribeToShard(ctx, p, o...) })
	if err != nil || out.GetStream() == nil {
		return out, err
	}
	ev := &events{in: c.in, shard: shard, inner: out.GetStream(), ch: make(chan types.SubscribeToShardEventStream), done: make(chan struct{})}
	go ev.pipe()
	setEventStream(out, kinesis.NewSubscribeToShardEventStream(func(es *kinesis.SubscribeToShardEventStream) { es.Reader = ev }))
	return out, nil
}

// setEventStream puts es in out in place of the SDK's stream. Setting the
// Reader of the SDK's stream instead would race with the goroutine the
// SDK starts on it (waitStreamClose), which reads Reader once, at a time
// the Go scheduler picks, and closes whichever it read when the
// connection ends: with the SDK's, it would drop an event events still
// holds (a paused instance's, say), with events, not; a run would then
// depend on the scheduler (see "What may vary"). Nothing starts that
// goroutine on es.
func setEventStream(out *kinesis.SubscribeToShardOutput, es *kinesis.SubscribeToShardEventStream) {
	f := reflect.ValueOf(out).Elem().FieldByName("eventStream")
	if !f.IsValid() || f.Type() != reflect.TypeOf(es) {
		panic("dst: kinesis.SubscribeToShardOutput holds its event stream otherwise: see setEventStream")
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(es))
}

// events is a fan-out subscription's event stream as in's runtime reads
// it: the SDK's events, each after in's latency for the shard (the
// subscriptions woken by one publish then go on at distinct instants),
// held while in is paused (a frozen process reads nothing; the server's
// pump blocks behind it, as on a connection nobody reads), its records
// fetched (see checkUnread). A crash or a KinesisFail breaks the stream
// at its next event, as a failing connection does.
type events struct {
	in    *instance
	shard string
	inner *kinesis.SubscribeToShardEventStream
	ch    chan types.SubscribeToShardEventStream
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error
}

func (e *events) pipe() {
	defer close(e.ch)
	for ev := range e.inner.Events() {
		if !e.travel() {
			return
		}
		e.in.gate()
		if err := e.in.kinesisFault(); err != nil {
			e.setErr(err)
			return
		}
		if m, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); ok {
			e.in.w.mu.Lock()
			e.in.fetchedLocked(e.shard, m.Value.Records)
			e.in.w.mu.Unlock()
		}
		select {
		case e.ch <- ev:
		case <-e.done:
			return
		}
	}
	// The end too (subscriptions of several shards cut, or ended by
	// their lifetime, at one instant).
	if e.travel() {
		e.in.gate()
	}
	e.setErr(e.inner.Err())
}

// travel waits for in's latency for the shard; false when closed meanwhile.
func (e *events) travel() bool {
	t := time.NewTimer(e.in.latency(e.shard))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.done:
		return false
	}
}

func (e *events) setErr(err error) {
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
}

func (e *events) Events() <-chan types.SubscribeToShardEventStream { return e.ch }

func (e *events) Close() error {
	e.once.Do(func() { close(e.done) })
	return e.inner.Close()
}

func (e *events) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// putCallTimeout is the publishers' WithPublishCallTimeout.
const putCallTimeout = 5 * time.Second

// putFaults are the publishers' injected PutRecords faults (world.mu).
type putFaults struct {
	slowUntil, lateUntil, hangUntil, failUntil time.Time
	slowLat                                    time.Duration
	failThrottle                               bool
}

// pubClient is the publishers' Kinesis client, under the world's
// PutRecords faults.
type pubClient struct {
	kinesisapi.API
	w *world
}

func (c *pubClient) PutRecords(ctx context.Context, p *kinesis.PutRecordsInput, o ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	c.w.mu.Lock()
	f := c.w.putFaults
	c.w.mu.Unlock()
	now := time.Now()
	switch {
	case now.Before(f.failUntil):
		if f.failThrottle {
			return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("dst: injected throttling")}
		}
		return nil, &types.InternalFailureException{Message: aws.String("dst: injected PutRecords failure")}
	case now.Before(f.hangUntil):
		<-ctx.Done()
		return nil, ctx.Err()
	case now.Before(f.lateUntil):
		// Stored; its answer lost on the way back.
		_, _ = c.API.PutRecords(context.WithoutCancel(ctx), p, o...)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out, err := c.API.PutRecords(ctx, p, o...)
	if now.Before(f.slowUntil) && sleepCtx(ctx, f.slowLat) != nil {
		return nil, ctx.Err()
	}
	return out, err
}
