package lease

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Memory is a Store held in process memory. It is the default store: leases
// live as long as the process, which suits one-process deployments and tests.
// It is safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	leases map[string]*Lease // updated in place: a Lease is too big to store by value without an allocation per write
	// members: namespace -> owner -> entry (see MemberStore)
	members map[string]map[string]Member
	roster  map[string]int64 // namespace -> roster version (RosterStore)
	// notices: namespace -> (owner, watcher) -> the notice on the version item
	notices map[string]map[[2]string]RosterNotice
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{leases: make(map[string]*Lease)} }

var _ Store = (*Memory)(nil)

// clone copies the slices of l so that neither the caller nor the store can
// change the other's lease through shared backing arrays. Every lease that
// enters or leaves the store goes through it.
func clone(l Lease) Lease {
	l.ParentShardIDs = slices.Clone(l.ParentShardIDs)
	l.ChildShardIDs = slices.Clone(l.ChildShardIDs)
	return l
}

// List returns the leases of namespace, sorted by key.
func (m *Memory) List(ctx context.Context, namespace string) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "list", Key: namespace, Err: err}
	}
	prefix := namespace + "/"
	m.mu.Lock()
	out := make([]Lease, 0, len(m.leases))
	for k, l := range m.leases {
		if strings.HasPrefix(k, prefix) {
			out = append(out, clone(*l))
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Get returns the lease with key, or an error matching ErrNotFound.
func (m *Memory) Get(ctx context.Context, key string) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, &Error{Op: "get", Key: key, Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok {
		return Lease{}, &Error{Op: "get", Key: key, Err: ErrNotFound}
	}
	return clone(*l), nil
}

// Create stores l unless a lease with its key exists. The stored copy keeps
// l's fields as given (Counter included), as the KCL's createLeaseIfNotExists does.
func (m *Memory) Create(ctx context.Context, l Lease) (bool, error) {
	_, created, err := m.CreateOrGet(ctx, l)
	return created, err
}

var _ CreateOrGetter = (*Memory)(nil)

// CreateOrGet stores l unless a lease has its key, and returns the lease
// stored.
func (m *Memory) CreateOrGet(ctx context.Context, l Lease) (Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, false, &Error{Op: "create", Key: l.Key, Err: err}
	}
	if err := validate("create", l, false); err != nil {
		return Lease{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.leases[l.Key]; ok {
		return clone(*cur), false, nil
	}
	stored := l
	stored.ParentShardIDs = normSet(l.ParentShardIDs)
	stored.ChildShardIDs = normSet(l.ChildShardIDs)
	m.leases[l.Key] = &stored
	return clone(stored), true, nil
}

// update applies change to the stored lease when it matches l (on Counter,
// and on Owner when checkOwner), bumps the counter and returns the result.
func (m *Memory) update(ctx context.Context, op string, l Lease, checkOwner bool, change func(*Lease)) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, &Error{Op: op, Key: l.Key, Err: err}
	}
	if err := validate(op, l, checkOwner); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.leases[l.Key]
	if !ok {
		return Lease{}, &Error{Op: op, Key: l.Key, Err: ErrNotFound}
	}
	if cur.Counter != l.Counter || (checkOwner && cur.Owner != l.Owner) {
		return Lease{}, &Error{Op: op, Key: l.Key, Err: ErrLeaseLost}
	}
	// Stored slices are never written in place (SetChildren stores a fresh
	// copy), so only the caller's result needs copies.
	change(cur)
	cur.Counter++
	return clone(*cur), nil
}

// Take sets the owner, clears PendingOwner and counts an owner switch.
func (m *Memory) Take(ctx context.Context, l Lease, owner string) (Lease, error) {
	if owner == "" {
		return Lease{}, invalid("take", l.Key, "empty owner (use Release)")
	}
	return m.update(ctx, "take", l, false, func(s *Lease) { applyTake(s, owner) })
}

// Renew keeps a held lease.
func (m *Memory) Renew(ctx context.Context, l Lease) (Lease, error) {
	return m.update(ctx, "renew", l, true, func(*Lease) {})
}

// Checkpoint records progress and resets OwnerSwitchesSinceCheckpoint.
func (m *Memory) Checkpoint(ctx context.Context, l Lease, checkpoint string, subSequence int64) (Lease, error) {
	if checkpoint == "" {
		return Lease{}, invalid("checkpoint", l.Key, "empty checkpoint")
	}
	return m.update(ctx, "checkpoint", l, true, func(s *Lease) {
		s.Checkpoint = checkpoint
		s.SubSequence = subSequence
		s.OwnerSwitchesSinceCheckpoint = 0
	})
}

// Release clears the owner.
func (m *Memory) Release(ctx context.Context, l Lease) (Lease, error) {
	return m.update(ctx, "release", l, true, func(s *Lease) { s.Owner = "" })
}

// RequestHandoff sets PendingOwner.
func (m *Memory) RequestHandoff(ctx context.Context, l Lease, to string) (Lease, error) {
	if to == "" {
		return Lease{}, invalid("handoff", l.Key, "empty pending owner")
	}
	return m.update(ctx, "handoff", l, false, func(s *Lease) { s.PendingOwner = to })
}

// SetChildren records the children of a closed shard.
func (m *Memory) SetChildren(ctx context.Context, l Lease, children []string) (Lease, error) {
	return m.update(ctx, "set-children", l, true, func(s *Lease) { s.ChildShardIDs = normSet(children) })
}

// Delete removes a lease.
func (m *Memory) Delete(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "delete", Key: l.Key, Err: err}
	}
	if err := validate("delete", l, false); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.leases[l.Key]
	if !ok {
		return &Error{Op: "delete", Key: l.Key, Err: ErrNotFound}
	}
	if cur.Counter != l.Counter {
		return &Error{Op: "delete", Key: l.Key, Err: ErrLeaseLost}
	}
	delete(m.leases, l.Key)
	return nil
}

// applyTake is the state change of Take, shared by the stores.
func applyTake(s *Lease, owner string) {
	if s.Owner != owner {
		s.OwnerSwitchesSinceCheckpoint++
	}
	s.Owner = owner
	s.PendingOwner = ""
	s.ForeignOwner = false
}

// validate rejects calls that no store could carry out: an empty key, or an
// owner-conditional call from nobody (which would match a released lease).
func validate(op string, l Lease, needOwner bool) error {
	if l.Key == "" {
		return invalid(op, l.Key, "empty key")
	}
	if needOwner && l.Owner == "" {
		return invalid(op, l.Key, "lease has no owner")
	}
	return nil
}

func invalid(op, key, why string) error {
	return &Error{Op: op, Key: key, Err: fmt.Errorf("%w: %s", ErrInvalid, why)}
}

var _ MemberStore = (*Memory)(nil)

// Heartbeat writes m as its owner's entry in namespace.
func (m *Memory) Heartbeat(ctx context.Context, namespace string, mb Member) error {
	key := MembersKey(namespace)
	if err := ctx.Err(); err != nil {
		return &Error{Op: "heartbeat", Key: key, Err: err}
	}
	if mb.Owner == "" {
		return invalid("heartbeat", key, "empty owner")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.members == nil {
		m.members = make(map[string]map[string]Member)
	}
	ns := m.members[namespace]
	if ns == nil {
		ns = make(map[string]Member)
		m.members[namespace] = ns
	}
	if cur, ok := ns[mb.Owner]; ok && cur.Dead && mb.Roster {
		return &Error{Op: "heartbeat", Key: key, Err: ErrDeclaredDead}
	}
	mb.Dead = false
	ns[mb.Owner] = cloneMember(mb)
	return nil
}

// Members returns the entries of namespace, sorted by owner.
func (m *Memory) Members(ctx context.Context, namespace string) ([]Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "members", Key: MembersKey(namespace), Err: err}
	}
	m.mu.Lock()
	out := make([]Member, 0, len(m.members[namespace]))
	for _, mb := range m.members[namespace] {
		out = append(out, cloneMember(mb))
	}
	m.mu.Unlock()
	sortMembers(out)
	return out, nil
}

// Leave removes owner's entry (while it has beat, when beat is non-zero).
func (m *Memory) Leave(ctx context.Context, namespace, owner string, beat int64) error {
	key := MembersKey(namespace)
	if err := ctx.Err(); err != nil {
		return &Error{Op: "leave", Key: key, Err: err}
	}
	if owner == "" {
		return invalid("leave", key, "empty owner")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.members[namespace][owner]
	switch {
	case !ok:
		return nil
	case beat != 0 && cur.Beat != beat:
		return &Error{Op: "leave", Key: key, Err: ErrLeaseLost}
	}
	delete(m.members[namespace], owner)
	return nil
}

var _ Lookup = (*Memory)(nil)

// GetMany returns the leases of keys that exist, sorted by key.
func (m *Memory) GetMany(ctx context.Context, keys []string) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "get-many", Err: err}
	}
	m.mu.Lock()
	out := make([]Lease, 0, len(keys))
	for _, k := range normSet(keys) {
		if l, ok := m.leases[k]; ok {
			out = append(out, clone(*l))
		}
	}
	m.mu.Unlock()
	return out, nil
}

var _ RosterNotices = (*Memory)(nil)

// RosterVersion returns the namespace's roster version.
func (m *Memory) RosterVersion(ctx context.Context, namespace string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, &Error{Op: "roster", Key: RosterKey(namespace), Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.roster[namespace], nil
}

// BumpRoster adds one to the namespace's roster version.
func (m *Memory) BumpRoster(ctx context.Context, namespace string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, &Error{Op: "roster bump", Key: RosterKey(namespace), Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.roster == nil {
		m.roster = make(map[string]int64)
	}
	m.roster[namespace]++
	return m.roster[namespace], nil
}

// MembersByOwner returns the roster version and the entries of owners
// that exist, sorted.
func (m *Memory) MembersByOwner(ctx context.Context, namespace string, owners []string) (int64, []Member, error) {
	v, ms, _, err := m.WatchRoster(ctx, namespace, owners)
	return v, ms, err
}

// WatchRoster returns the roster version, the entries of owners that
// exist and the notices, each sorted by owner.
func (m *Memory) WatchRoster(ctx context.Context, namespace string, owners []string) (int64, []Member, []RosterNotice, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, nil, &Error{Op: "members", Key: MembersKey(namespace), Err: err}
	}
	m.mu.Lock()
	out := make([]Member, 0, len(owners))
	for _, o := range normSet(owners) {
		if mb, ok := m.members[namespace][o]; ok {
			out = append(out, cloneMember(mb))
		}
	}
	v := m.roster[namespace]
	var ns []RosterNotice
	for _, n := range m.notices[namespace] {
		ns = append(ns, n)
	}
	m.mu.Unlock()
	sortMembers(out)
	sortNotices(ns)
	return v, out, ns, nil
}

// PostNotice puts n on the namespace's roster unless n.By's notice of
// n.Owner at a later beat is there.
func (m *Memory) PostNotice(ctx context.Context, namespace string, n RosterNotice) error {
	key := RosterKey(namespace)
	if err := ctx.Err(); err != nil {
		return &Error{Op: "roster notice", Key: key, Err: err}
	}
	if n.Owner == "" {
		return invalid("roster notice", key, "empty owner")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{n.Owner, n.By}
	if cur, ok := m.notices[namespace][k]; ok && cur.Beat > n.Beat {
		return nil
	}
	if m.notices == nil {
		m.notices = make(map[string]map[[2]string]RosterNotice)
	}
	if m.notices[namespace] == nil {
		m.notices[namespace] = make(map[[2]string]RosterNotice)
	}
	m.notices[namespace][k] = n
	return nil
}

// WithdrawNotice removes n.By's notice of n.Owner while it names n.Beat
// or earlier.
func (m *Memory) WithdrawNotice(ctx context.Context, namespace string, n RosterNotice) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "roster notice", Key: RosterKey(namespace), Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{n.Owner, n.By}
	if cur, ok := m.notices[namespace][k]; ok && cur.Beat <= n.Beat {
		delete(m.notices[namespace], k)
	}
	return nil
}

// DeclareDead marks owner's entry dead while it holds beat.
func (m *Memory) DeclareDead(ctx context.Context, namespace, owner string, beat int64) error {
	key := MembersKey(namespace)
	if err := ctx.Err(); err != nil {
		return &Error{Op: "declare dead", Key: key, Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.members[namespace][owner]
	if !ok || cur.Beat != beat {
		return &Error{Op: "declare dead", Key: key, Err: ErrLeaseLost}
	}
	cur.Dead = true
	m.members[namespace][owner] = cur
	return nil
}
