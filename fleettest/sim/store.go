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
	// The calls of a lease.RosterStore (shard.Config.Roster): the version
	// read, its bump, the watched entries read by key (one per 100 keys,
	// as BatchGetItem takes them), a death declared, a notice posted or
	// withdrawn.
	OpRoster
	OpBump
	OpMembersByOwner
	OpDeclare
	OpNotice
	opCount
)

var opNames = [opCount]string{"list", "get", "create", "take", "renew", "checkpoint", "release", "handoff", "set-children", "delete", "heartbeat", "members", "leave", "get-many", "roster", "bump", "members-by-owner", "declare", "notice"}

func (o Op) String() string { return opNames[o] }

// write reports whether o is a write (everything but List, Get and Members).
func (o Op) write() bool {
	return o != OpList && o != OpGet && o != OpMembers && o != OpGetMany && o != OpRoster && o != OpMembersByOwner
}

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
	// DynamoDB store makes them (see capacity.go), the member calls in the
	// run's layout (Config.Members).
	RCU, WCU float64
	// MembersRCU and MembersWCU are the units of the member calls alone
	// (Heartbeat, Members, Leave), billed as each layout would bill the
	// same calls (indexed by lease.MembersLayout), side by side.
	MembersRCU, MembersWCU [layouts]float64
}

// layouts is the number of lease.MembersLayout values.
const layouts = 3

// Reads is the number of read calls (List and Get).
func (c Counts) Reads() int64 {
	return c.Calls[OpList] + c.Calls[OpGet] + c.Calls[OpMembers] + c.Calls[OpGetMany] + c.Calls[OpRoster] + c.Calls[OpMembersByOwner]
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
	for i := range c.MembersRCU {
		c.MembersRCU[i] -= d.MembersRCU[i]
		c.MembersWCU[i] -= d.MembersWCU[i]
	}
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

	// The member entries as last written, for the units of each layout's
	// calls: item is the size of each owner's entry in the members item
	// (MembersItem), table the size of its own item in the members table.
	mu                    sync.Mutex
	item, table           map[string]int
	itemTotal, tableTotal int
	// layoutHalfRCU and layoutWCU are the member calls' units per layout.
	layoutHalfRCU [layouts]atomic.Int64
	layoutWCU     [layouts]atomic.Int64
	layout        lease.MembersLayout // the run's layout, billed in halfRCU and wcu
}

// itemBytes is the DynamoDB size of the members item of ns (MembersItem):
// its key and map, and each entry (the owner's name, a map of beat, held,
// asks and starting), a map counted as 3 bytes plus 1 per element, as
// DynamoDB sizes them. Locked.
func (c *counters) itemBytes(ns string) int {
	return len("leaseKey") + len(lease.MembersKey(ns)) + len("members") + 3 + c.itemTotal
}

// memberEntry returns the size of m's entry in the members item and of its
// own item in the members table (attributes ns, owner, beat, held, asks,
// starting, fenced, leaving, roster).
func memberEntry(ns string, m lease.Member) (item, table int) {
	fields, elems := len("beat")+numBytes(m.Beat)+len("held")+numBytes(int64(m.Held)), 2
	if len(m.Asks) > 0 {
		fields += len("asks")
		for _, a := range m.Asks {
			fields += len(a)
		}
		elems++
	}
	if m.Starting {
		fields += len("starting") + 1
		elems++
	}
	if m.Fenced {
		fields += len("fenced") + 1
		elems++
	}
	if m.Leaving {
		fields += len("leaving") + 1
		elems++
	}
	if m.Roster {
		fields += len("roster") + 1
		elems++
	}
	// In the item: the owner's name, a byte as an element of the members
	// map, and its own map (3 bytes, a byte per element).
	item = len(m.Owner) + 1 + 3 + elems + fields
	table = len("ns") + len(ns) + len("owner") + len(m.Owner) + fields
	return item, table
}

// setMember records m's entry (gone: removed) and returns the size of its
// own members-table item before and after.
func (c *counters) setMember(ns string, m lease.Member, gone bool) (before, after int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.item == nil {
		c.item, c.table = map[string]int{}, map[string]int{}
	}
	before = c.table[m.Owner]
	c.itemTotal -= c.item[m.Owner]
	c.tableTotal -= c.table[m.Owner]
	delete(c.item, m.Owner)
	delete(c.table, m.Owner)
	if gone {
		return before, 0
	}
	i, t := memberEntry(ns, m)
	c.item[m.Owner], c.table[m.Owner] = i, t
	c.itemTotal += i
	c.tableTotal += t
	return before, t
}

// billMembers adds the units of one member call in each layout: reads in
// read units (strongly consistent), writes in write units; the run's
// layout's also to the totals.
func (c *counters) billMembers(reads, writes [layouts]int64) {
	for l := range layouts {
		c.layoutHalfRCU[l].Add(2 * reads[l])
		c.layoutWCU[l].Add(writes[l])
	}
	c.halfRCU.Add(2 * reads[c.layout])
	c.wcu.Add(writes[c.layout])
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
	for l := range layouts {
		s.MembersRCU[l] = float64(c.layoutHalfRCU[l].Load()) / 2
		s.MembersWCU[l] = float64(c.layoutWCU[l].Load())
	}
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
// keeps members and its layout allows them (lease.MembersOf), as a
// RosterStore when it keeps the roster too (lease.RosterOf), as a
// RosterNotices when its version item carries notices.
func newStore(s *store) lease.Store {
	if m, ok := lease.MembersOf(s.inner); ok {
		ms := &memberStore{store: s, m: m}
		if r, ok := lease.RosterOf(s.inner); ok {
			rs := &rosterStore{memberStore: ms, r: r}
			if n, ok := r.(lease.RosterNotices); ok {
				return &noticeStore{rosterStore: rs, n: n}
			}
			return rs
		}
		return ms
	}
	return s
}

// rosterStore is memberStore over a lease.RosterStore. Its calls are
// billed as the DynamoDB store makes them (runtime/lease/dynamoroster.go),
// in the members-table layouts (the members item keeps no roster: its
// columns get nothing):
//
//   - RosterVersion: a strongly consistent GetItem of the small version
//     item, a read unit.
//   - BumpRoster: an UpdateItem (ADD) of it, a write unit.
//   - MembersByOwner: a strongly consistent BatchGetItem of the version
//     item and the owners' items (one call per 100 keys), billed as a
//     GetItem per key: the item's size in 4 KB units, one unit at least
//     (an absent item too).
//   - DeclareDead: a conditional UpdateItem of the owner's item, billed by
//     its size in 1 KB units (refused or not).
type rosterStore struct {
	*memberStore
	r lease.RosterStore
}

var _ lease.RosterStore = (*rosterStore)(nil)

// noticeStore is rosterStore over a lease.RosterNotices, billed as the
// DynamoDB store makes its calls:
//
//   - WatchRoster, and MembersByOwner (the same read): the version item
//     billed with the notices it holds (noticeBytes).
//   - PostNotice, WithdrawNotice: a conditional UpdateItem of the version
//     item, a write unit (refused or not).
type noticeStore struct {
	*rosterStore
	n lease.RosterNotices
}

var _ lease.RosterNotices = (*noticeStore)(nil)

func tableOnly(u int64) [layouts]int64 {
	return [layouts]int64{lease.MembersTable: u, lease.MembersMigrating: u}
}

func (s *rosterStore) RosterVersion(ctx context.Context, ns string) (int64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	v, err := s.r.RosterVersion(ctx, ns)
	s.c.calls[OpRoster].Add(1)
	if err != nil {
		s.c.errors.Add(1)
	}
	s.c.billMembers(tableOnly(readUnits(0)), [layouts]int64{})
	return v, err
}

func (s *rosterStore) BumpRoster(ctx context.Context, ns string) (int64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	v, err := s.r.BumpRoster(ctx, ns)
	s.c.calls[OpBump].Add(1)
	if err != nil {
		s.c.errors.Add(1)
	}
	s.c.billMembers([layouts]int64{}, tableOnly(writeUnits(0)))
	return v, err
}

func (s *rosterStore) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	v, ms, _, err := s.byOwner(ctx, owners, func() (int64, []lease.Member, []lease.RosterNotice, error) {
		v, ms, err := s.r.MembersByOwner(ctx, ns, owners)
		return v, ms, nil, err
	})
	return v, ms, err
}

func (s *noticeStore) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	v, ms, _, err := s.WatchRoster(ctx, ns, owners)
	return v, ms, err
}

func (s *noticeStore) WatchRoster(ctx context.Context, ns string, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	return s.byOwner(ctx, owners, func() (int64, []lease.Member, []lease.RosterNotice, error) {
		return s.n.WatchRoster(ctx, ns, owners)
	})
}

// byOwner bills read, a read of the version item (with the notices it
// returns) and owners' items.
func (s *rosterStore) byOwner(ctx context.Context, owners []string, read func() (int64, []lease.Member, []lease.RosterNotice, error)) (int64, []lease.Member, []lease.RosterNotice, error) {
	if err := s.enter(ctx); err != nil {
		return 0, nil, nil, err
	}
	v, ms, notices, err := read()
	s.c.calls[OpMembersByOwner].Add(int64(max(1, (len(owners)+1+99)/100)))
	if err != nil {
		s.c.errors.Add(1)
	}
	s.c.itemsRead.Add(int64(len(ms)) + 1)
	u := readUnits(noticeBytes(notices)) // the version item
	s.c.mu.Lock()
	for _, o := range owners {
		u += readUnits(s.c.table[o])
	}
	s.c.mu.Unlock()
	s.c.billMembers(tableOnly(u), [layouts]int64{})
	return v, ms, notices, err
}

// noticeBytes is the size of the version item's notices (the DynamoDB
// store's attributes: "notice:" and the owner and watcher quoted, a map
// of two numbers).
func noticeBytes(ns []lease.RosterNotice) int {
	b := 0
	for _, n := range ns {
		b += len("notice:") + len(n.Owner) + len(n.By) + 4 + 3 + 2*(1+1+21)
	}
	return b
}

func (s *noticeStore) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return s.notice(ctx, func() error { return s.n.PostNotice(ctx, ns, n) })
}

func (s *noticeStore) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return s.notice(ctx, func() error { return s.n.WithdrawNotice(ctx, ns, n) })
}

func (s *noticeStore) notice(ctx context.Context, call func() error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	err := call()
	s.c.calls[OpNotice].Add(1)
	if err != nil {
		s.c.errors.Add(1)
	}
	s.c.billMembers([layouts]int64{}, tableOnly(writeUnits(0)))
	return err
}

func (s *rosterStore) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	err := s.r.DeclareDead(ctx, ns, owner, beat)
	s.c.calls[OpDeclare].Add(1)
	switch {
	case err == nil:
	case errors.Is(err, lease.ErrLeaseLost):
		s.c.lostConditions.Add(1)
	default:
		s.c.errors.Add(1)
	}
	s.c.mu.Lock()
	u := writeUnits(s.c.table[owner] + len("dead") + 1)
	s.c.mu.Unlock()
	s.c.billMembers([layouts]int64{}, tableOnly(u))
	return err
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

// The member calls, billed as each layout makes them (lease.MembersLayout):
//
//   - MembersItem: a heartbeat is one UpdateItem of the members item,
//     billed by the item's size after it (every entry); a read one
//     strongly consistent GetItem of it; a leave one conditional
//     UpdateItem of it.
//   - MembersTable: a heartbeat is one PutItem of the owner's own item,
//     billed by the larger of its size before and after; a read one
//     strongly consistent Query, billed by the total size of the items it
//     returns rounded up to 4 KB once per call (one read unit at least); a
//     leave one DeleteItem of the owner's item (a unit at least, refused
//     or not).
//   - MembersMigrating, no instance of an earlier version running (as in a
//     simulated fleet): MembersTable's calls, and a read also reads the
//     members item (one strongly consistent GetItem: one unit for an item
//     that is absent or small), a graceful leave (beat 0) also tries to
//     take its entry out of that item (one write unit, refused or not).

// Heartbeat writes the owner's entry.
func (s *memberStore) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	err := s.m.Heartbeat(ctx, ns, m)
	s.c.calls[OpHeartbeat].Add(1)
	before, after := 0, 0
	if err == nil {
		before, after = s.c.setMember(ns, m, false)
	} else {
		_, after = memberEntry(ns, m)
		s.c.errors.Add(1)
	}
	s.c.mu.Lock()
	item := writeUnits(s.c.itemBytes(ns))
	s.c.mu.Unlock()
	table := writeUnits(max(before, after))
	s.c.billMembers([layouts]int64{}, [layouts]int64{lease.MembersItem: item, lease.MembersTable: table, lease.MembersMigrating: table})
	return err
}

// Members reads every entry.
func (s *memberStore) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	ms, err := s.m.Members(ctx, ns)
	s.c.calls[OpMembers].Add(1)
	if err == nil {
		s.c.itemsRead.Add(1)
	} else {
		s.c.errors.Add(1)
	}
	s.c.mu.Lock()
	item := readUnits(s.c.itemBytes(ns))
	query := queryUnits(int64(s.c.tableTotal))
	s.c.mu.Unlock()
	s.c.billMembers([layouts]int64{lease.MembersItem: item, lease.MembersTable: query, lease.MembersMigrating: query + readUnits(0)}, [layouts]int64{})
	return ms, err
}

// Leave removes an entry, conditional on its beat unless beat is 0.
func (s *memberStore) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	s.c.mu.Lock()
	item := writeUnits(s.c.itemBytes(ns))
	table := writeUnits(s.c.table[owner])
	s.c.mu.Unlock()
	err := s.m.Leave(ctx, ns, owner, beat)
	s.c.calls[OpLeave].Add(1)
	switch {
	case err == nil:
		s.c.setMember(ns, lease.Member{Owner: owner}, true)
	case errors.Is(err, lease.ErrLeaseLost):
		s.c.lostConditions.Add(1)
	default:
		s.c.errors.Add(1)
	}
	migrating := table
	if beat == 0 {
		migrating += writeUnits(0)
	}
	s.c.billMembers([layouts]int64{}, [layouts]int64{lease.MembersItem: item, lease.MembersTable: table, lease.MembersMigrating: migrating})
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
