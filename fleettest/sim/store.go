package sim

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Op is one lease-store operation, as the wrapper counts it.
type Op int

// The operations of lease.Store.
const (
	OpList Op = iota
	OpGet
	OpCreate
	OpTake
	OpRenew
	OpCheckpoint
	OpRelease
	OpHandoff
	OpSetChildren
	OpDelete
	// The calls of a lease.MemberStore: one entry per instance.
	OpHeartbeat
	OpMembers
	OpLeave
	// OpGetMany counts the batch reads of a lease.Lookup (one per 100
	// keys, as BatchGetItem takes them).
	OpGetMany
	opCount
)

var opNames = [opCount]string{"list", "get", "create", "take", "renew", "checkpoint", "release", "handoff", "set-children", "delete", "heartbeat", "members", "leave", "get-many"}

func (o Op) String() string { return opNames[o] }

// write reports whether o is a write (everything but List, Get and Members).
func (o Op) write() bool { return o != OpList && o != OpGet && o != OpMembers && o != OpGetMany }

// Counts is what the lease store was asked, summed over instances. Calls
// that never reached the store (an instance crashed or cut off) are not in
// it: nothing would have billed them.
type Counts struct {
	Calls [opCount]int64
	// ItemsRead counts the leases List and Get returned.
	ItemsRead int64
	// BytesRead is the DynamoDB size (ItemBytes) of every item a List
	// returned: a Scan is billed by the bytes it reads.
	BytesRead int64
	// LostConditions counts conditional writes refused because the lease
	// moved (ErrLeaseLost), and creates of a lease that existed: DynamoDB
	// bills them as writes (the item comes with the refusal: no read).
	LostConditions int64
	// RefusedCreates counts the creates (in LostConditions) refused
	// because another instance had created the lease: a write unit each,
	// for nothing.
	RefusedCreates int64
	// Moves counts successful Takes that changed a lease's owner.
	Moves int64
	// Errors counts other failures the store returned.
	Errors int64
	// RCU and WCU are the DynamoDB capacity units the calls cost, as the
	// DynamoDB store makes them (see capacity.go).
	RCU, WCU float64
}

// Reads is the number of read calls (List and Get).
func (c Counts) Reads() int64 {
	return c.Calls[OpList] + c.Calls[OpGet] + c.Calls[OpMembers] + c.Calls[OpGetMany]
}

// Writes is the number of write calls, refused ones included.
func (c Counts) Writes() int64 {
	var n int64
	for o := Op(0); o < opCount; o++ {
		if o.write() {
			n += c.Calls[o]
		}
	}
	return n
}

// Sub returns c - d, field by field.
func (c Counts) Sub(d Counts) Counts {
	for i := range c.Calls {
		c.Calls[i] -= d.Calls[i]
	}
	c.ItemsRead -= d.ItemsRead
	c.BytesRead -= d.BytesRead
	c.LostConditions -= d.LostConditions
	c.RefusedCreates -= d.RefusedCreates
	c.Moves -= d.Moves
	c.Errors -= d.Errors
	c.RCU -= d.RCU
	c.WCU -= d.WCU
	return c
}

// counters are the atomics behind Counts.
type counters struct {
	calls          [opCount]atomic.Int64
	itemsRead      atomic.Int64
	bytesRead      atomic.Int64
	lostConditions atomic.Int64
	refusedCreates atomic.Int64
	moves          atomic.Int64
	errors         atomic.Int64
	// halfRCU and wcu count capacity in half read units (an eventually
	// consistent 4 KB) and write units, so they stay integers.
	halfRCU atomic.Int64
	wcu     atomic.Int64

	// members is the size of each owner's entry in the members item, as
	// last written, for the units of reading and writing that item.
	mu      sync.Mutex
	members map[string]int
}

// membersBytes is the DynamoDB size of the members item: its key and map,
// and each entry (the owner's name, a map of beat, held, asks and
// starting), a map
// counted as 3 bytes plus 1 per element, as DynamoDB sizes them.
func (c *counters) membersBytes(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len("leaseKey") + len(lease.MembersKey(ns)) + len("members") + 3
	for _, e := range c.members {
		n += e
	}
	return n
}

func (c *counters) setMember(m lease.Member, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members == nil {
		c.members = map[string]int{}
	}
	if gone {
		delete(c.members, m.Owner)
		return
	}
	e := len(m.Owner) + 1 + 3 + 3 + len("beat") + numBytes(m.Beat) + len("held") + numBytes(int64(m.Held))
	if len(m.Asks) > 0 {
		e += len("asks")
		for _, a := range m.Asks {
			e += len(a)
		}
	}
	if m.Starting {
		e += len("starting") + 1
	}
	c.members[m.Owner] = e
}

func (c *counters) snapshot() Counts {
	var s Counts
	for i := range s.Calls {
		s.Calls[i] = c.calls[i].Load()
	}
	s.ItemsRead = c.itemsRead.Load()
	s.BytesRead = c.bytesRead.Load()
	s.LostConditions = c.lostConditions.Load()
	s.RefusedCreates = c.refusedCreates.Load()
	s.Moves = c.moves.Load()
	s.Errors = c.errors.Load()
	s.RCU = float64(c.halfRCU.Load()) / 2
	s.WCU = float64(c.wcu.Load())
	return s
}

// Fault is what an instance's lease-store calls go through.
type Fault int

const (
	// Healthy: calls reach the store after the configured latency.
	Healthy Fault = iota
	// Dead: calls fail at once and are not counted (a crashed process
	// makes no calls; its goroutines live on only because they are in
	// this process).
	Dead
	// Cut: calls fail at once and are not counted (a network partition
	// that refuses connections).
	Cut
	// Hang: calls are held unanswered until their deadline (a network
	// partition that drops packets) and are not counted.
	Hang
)

// errCut is the error of a call that did not reach the store.
var errCut = errors.New("sim: lease store unreachable")

// store is one instance's view of the shared lease store: it counts every
// call into the fleet's counters, adds latency and applies the instance's
// fault.
type store struct {
	inner   lease.Store
	c       *counters
	latency time.Duration
	fault   *atomic.Int32 // a Fault
	// moved is called after a Take that changed a lease's owner;
	// checkpointed after a checkpoint written.
	moved        func(key, from, to string)
	checkpointed func(owner, shard, seq string)

	// listUnits is what the last List cost, by namespace (ListUnits).
	listMu    sync.Mutex
	listUnits map[string]float64
}

var _ lease.Store = (*store)(nil)

// enter applies the fault and the latency; false means the call does not
// reach the store and must return err.
func (s *store) enter(ctx context.Context) error {
	switch Fault(s.fault.Load()) {
	case Dead, Cut:
		return errCut
	case Hang:
		<-ctx.Done()
		return errors.Join(errCut, ctx.Err())
	}
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// count records one call that reached the store and what DynamoDB would
// bill for it: a write its item's write units (refused or not). A refused
// conditional write costs no read: the DynamoDB store asks for the item
// with the refusal (ReturnValuesOnConditionCheckFailure ALL_OLD), which
// DynamoDB bills no read unit for.
func (s *store) count(op Op, err error, size int) {
	s.c.calls[op].Add(1)
	switch {
	case op == OpGet || op == OpMembers:
		s.c.halfRCU.Add(2 * readUnits(size))
	case op.write():
		s.c.wcu.Add(writeUnits(size))
	}
	switch {
	case err == nil:
	case errors.Is(err, lease.ErrLeaseLost):
		s.c.lostConditions.Add(1)
	case errors.Is(err, lease.ErrNotFound) && op == OpGet:
	default:
		s.c.errors.Add(1)
	}
}

// written is count for a mutation of l that stored nl.
func (s *store) written(op Op, l, nl lease.Lease, err error) {
	s.count(op, err, max(ItemBytes(l), ItemBytes(nl)))
}

func (s *store) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	ls, err := s.inner.List(ctx, ns)
	var b int64
	for i := range ls {
		b += int64(ItemBytes(ls[i]))
	}
	s.count(OpList, err, 0)
	s.c.itemsRead.Add(int64(len(ls)))
	s.c.bytesRead.Add(b)
	// A strongly consistent Scan, billed by the bytes it reads (per 1 MB
	// page, rounded up to 4 KB).
	s.c.halfRCU.Add(2 * scanUnits(b))
	if err == nil {
		s.listMu.Lock()
		if s.listUnits == nil {
			s.listUnits = map[string]float64{}
		}
		s.listUnits[ns] = float64(scanUnits(b))
		s.listMu.Unlock()
	}
	return ls, err
}

var _ lease.ListCost = (*store)(nil)

// ListUnits is the DynamoDB store's (lease.ListCost): the read units the
// last List of ns cost, as DynamoDB bills the Scan; from the inner store
// when it measures them itself (DynamoDB), else as counted above.
func (s *store) ListUnits(ns string) (float64, bool) {
	if lc, ok := s.inner.(lease.ListCost); ok {
		return lc.ListUnits(ns)
	}
	s.listMu.Lock()
	defer s.listMu.Unlock()
	u, ok := s.listUnits[ns]
	return u, ok
}

func (s *store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	l, err := s.inner.Get(ctx, key)
	s.count(OpGet, err, ItemBytes(l))
	if err == nil {
		s.c.itemsRead.Add(1)
	}
	return l, err
}

func (s *store) Create(ctx context.Context, l lease.Lease) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	ok, err := s.inner.Create(ctx, l)
	s.count(OpCreate, err, ItemBytes(l))
	if err == nil && !ok {
		// A refused conditional PutItem (its item comes with the refusal).
		s.c.lostConditions.Add(1)
		s.c.refusedCreates.Add(1)
	}
	return ok, err
}

var _ lease.CreateOrGetter = (*store)(nil)

// CreateOrGet is Create returning the lease stored (lease.CreateOrGetter):
// one conditional PutItem whose refusal carries the item, billed as a
// write and no read. Over a store without CreateOrGet, a Create and, when
// it is refused, a Get, each counted.
func (s *store) CreateOrGet(ctx context.Context, l lease.Lease) (lease.Lease, bool, error) {
	cg, ok := s.inner.(lease.CreateOrGetter)
	if !ok {
		created, err := s.Create(ctx, l)
		if err != nil || created {
			return l, created, err
		}
		got, err := s.Get(ctx, l.Key)
		return got, false, err
	}
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, false, err
	}
	got, created, err := cg.CreateOrGet(ctx, l)
	s.count(OpCreate, err, ItemBytes(l))
	if err == nil && !created {
		s.c.lostConditions.Add(1)
		s.c.refusedCreates.Add(1)
	}
	return got, created, err
}

func (s *store) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.Take(ctx, l, owner)
	s.written(OpTake, l, nl, err)
	if err == nil && l.Owner != owner {
		s.c.moves.Add(1)
		if s.moved != nil {
			s.moved(l.Key, l.Owner, owner)
		}
	}
	return nl, err
}

func (s *store) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.Renew(ctx, l)
	s.written(OpRenew, l, nl, err)
	return nl, err
}

func (s *store) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.Checkpoint(ctx, l, cp, sub)
	s.written(OpCheckpoint, l, nl, err)
	if err == nil && s.checkpointed != nil {
		s.checkpointed(l.Owner, l.ShardID, cp)
	}
	return nl, err
}

func (s *store) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.Release(ctx, l)
	s.written(OpRelease, l, nl, err)
	return nl, err
}

func (s *store) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.RequestHandoff(ctx, l, to)
	s.written(OpHandoff, l, nl, err)
	return nl, err
}

func (s *store) SetChildren(ctx context.Context, l lease.Lease, children []string) (lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return lease.Lease{}, err
	}
	nl, err := s.inner.SetChildren(ctx, l, children)
	s.written(OpSetChildren, l, nl, err)
	return nl, err
}

func (s *store) Delete(ctx context.Context, l lease.Lease) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	err := s.inner.Delete(ctx, l)
	s.count(OpDelete, err, ItemBytes(l))
	return err
}

// memberStore is store over a lease.MemberStore: it keeps members too.
type memberStore struct {
	*store
	m lease.MemberStore
}

var (
	_ lease.MemberStore = (*memberStore)(nil)
	_ lease.Lookup      = (*memberStore)(nil)
)

// newStore wraps inner for one instance, as a MemberStore when inner
// keeps members and its layout allows them (lease.MembersOf).
func newStore(s *store) lease.Store {
	if m, ok := lease.MembersOf(s.inner); ok {
		return &memberStore{store: s, m: m}
	}
	return s
}

// GetMany reads the leases of keys (lease.Lookup): one strongly
// consistent BatchGetItem per 100 keys, billed per item read; Get by Get
// when the inner store has no Lookup.
func (s *memberStore) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	var ls []lease.Lease
	var err error
	if lk, ok := s.inner.(lease.Lookup); ok {
		ls, err = lk.GetMany(ctx, keys)
	} else {
		for _, k := range keys {
			l, gerr := s.inner.Get(ctx, k)
			if gerr == nil {
				ls = append(ls, l)
			} else if !errors.Is(gerr, lease.ErrNotFound) {
				err = gerr
				break
			}
		}
	}
	s.c.calls[OpGetMany].Add(int64(max(1, (len(keys)+99)/100)))
	if err != nil {
		s.c.errors.Add(1)
	}
	s.c.itemsRead.Add(int64(len(ls)))
	for i := range ls {
		s.c.halfRCU.Add(2 * readUnits(ItemBytes(ls[i])))
	}
	return ls, err
}

// Heartbeat is one UpdateItem of the members item (billed by its size).
func (s *memberStore) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	err := s.m.Heartbeat(ctx, ns, m)
	if err == nil {
		s.c.setMember(m, false)
	}
	s.count(OpHeartbeat, err, s.c.membersBytes(ns))
	return err
}

// Members is one strongly consistent GetItem of the members item.
func (s *memberStore) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	ms, err := s.m.Members(ctx, ns)
	s.count(OpMembers, err, s.c.membersBytes(ns))
	if err == nil {
		s.c.itemsRead.Add(1)
	}
	return ms, err
}

// Leave is one conditional UpdateItem of the members item.
func (s *memberStore) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	size := s.c.membersBytes(ns)
	err := s.m.Leave(ctx, ns, owner, beat)
	if err == nil {
		s.c.setMember(lease.Member{Owner: owner}, true)
	}
	s.count(OpLeave, err, size)
	return err
}

// EnsureTable passes a DynamoDB store's table check through (uncounted: it
// runs once per process).
func (s *store) EnsureTable(ctx context.Context) error {
	if e, ok := s.inner.(interface{ EnsureTable(context.Context) error }); ok {
		return e.EnsureTable(ctx)
	}
	return nil
}

// moveLog remembers the owner changes of the run, in order.
type moveLog struct {
	mu    sync.Mutex
	moves []move
}

type move struct {
	at       time.Time
	key      string
	from, to string
}

func (m *moveLog) add(key, from, to string) {
	m.mu.Lock()
	m.moves = append(m.moves, move{at: time.Now(), key: key, from: from, to: to})
	m.mu.Unlock()
}

func (m *moveLog) since(t time.Time) []move {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []move
	for _, mv := range m.moves {
		if !mv.at.Before(t) {
			out = append(out, mv)
		}
	}
	return out
}
