package lease

import (
	"context"
	"slices"
)

// MembersKey is the key of the item that holds a namespace's members in
// the lease table (see MemberStore; the DynamoDB store's MembersItem
// layout, and the one MembersMigrating still reads). Like LeaderKey it sits beside the namespace's leases but
// outside List(namespace).
func MembersKey(namespace string) string { return namespace + "#members" }

// Member is one instance's liveness entry in a namespace: the instance
// writes it every renewal interval instead of renewing each lease it holds.
type Member struct {
	Owner string
	// Beat changes with every heartbeat; an entry whose Beat has stood
	// still for the failover time (on the reader's clock) is a dead
	// instance's.
	Beat int64
	// Held is how many unfinished leases the owner holds, as it last said.
	Held int
	// Asks are the shard ids of the leases the owner has asked other owners
	// to hand over and not yet taken: an owner reads the members every pass
	// and so learns of requests for leases it does not write at rest.
	Asks []string
	// Starting says the owner is in its first lease pass. A fleet's start
	// gives the leases to create to the starting members only: any other
	// entry may be a dead instance's, which looks alive until its beat has
	// stood still for the failover time.
	Starting bool
	// Fenced says the owner has fenced itself: it could not confirm a
	// heartbeat within its fence time (its store slow, late, throttled or
	// failing) and reads none of the leases it holds. Every heartbeat it
	// sends while fenced says so, with the beat unchanged; the first one
	// confirmed after that writes a new beat without it. Others count a
	// fenced member dead at once and take its leases without waiting the
	// failover time (issue 29, defect 2: a beat that lands but is answered
	// late would otherwise look alive for a failover time more).
	//
	// Rolling deploys: a reader of an earlier version ignores the field
	// (the attribute is unknown to it) and judges the entry by its beat
	// alone, as before: a fenced member's beat stands still, so it sees
	// it dead a failover time after the beat last moved.
	Fenced bool
	// Leaving says the owner is stopping: it takes no lease any more and
	// releases those it holds, or leaves them to expire (a handler that
	// never returns: shard.LeftToExpireError). Others give it no share and
	// no free lease (it would never take them), but still take its leases
	// only when it is dead by its beat: a handler of it may still run.
	//
	// Rolling deploys: a reader of an earlier version ignores the field
	// and counts the owner as any live member until its beat stands still
	// (it may plan a free lease for it for up to a failover time, as
	// before).
	Leaving bool
	// Roster says the owner keeps the roster (RosterStore): its beat is
	// watched by a few members only, and its heartbeat is refused with
	// ErrDeclaredDead once a watcher declared it dead. An entry without it
	// (an earlier version's) is read by every instance every pass.
	Roster bool
	// Dead says a watcher declared the entry dead at its Beat
	// (RosterStore.DeclareDead): every reader counts it dead.
	Dead bool
}

// MemberStore is a Store that also keeps instance liveness: one entry per
// instance and namespace, read together, so one strongly consistent read
// (a GetItem of one item, or a Query of a namespace's items: see
// MembersLayout) returns every member and nothing of another namespace. Each instance writes its own entry only (and removes a dead
// one's). With it a coordinator writes a lease only when its ownership
// changes and at checkpoints, never to keep it.
//
// The lease items are still fenced per lease: every ownership change and
// checkpoint is a conditional write on the lease's counter and owner.
type MemberStore interface {
	Store
	// Heartbeat writes m as its owner's entry in namespace (creating the
	// namespace's item when missing).
	Heartbeat(ctx context.Context, namespace string, m Member) error
	// Members returns the entries of namespace, sorted by owner, Asks
	// sorted (none: an empty slice and no error).
	Members(ctx context.Context, namespace string) ([]Member, error)
	// Leave removes owner's entry; with beat non-zero only while the entry
	// still has that beat (another instance removing a dead one's), else
	// an error matching ErrLeaseLost. Removing an absent entry is no error.
	Leave(ctx context.Context, namespace, owner string, beat int64) error
}

// PerLeaseOnly is implemented by a store whose layout needs every lease
// renewed by its holder, so that other readers of the table can judge
// liveness by each lease's counter (the KCL's layout: the Java KCL expires
// a lease whose counter stands still). A store that reports true is used
// with per-lease renewal even if it is a MemberStore.
type PerLeaseOnly interface {
	PerLeaseOnly() bool
}

// MembersOf returns s as a MemberStore when it keeps members and its
// layout allows liveness per instance.
func MembersOf(s Store) (MemberStore, bool) {
	if p, ok := s.(PerLeaseOnly); ok && p.PerLeaseOnly() {
		return nil, false
	}
	m, ok := s.(MemberStore)
	return m, ok
}

func cloneMember(m Member) Member {
	m.Asks = normSet(m.Asks)
	return m
}

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		switch {
		case a.Owner < b.Owner:
			return -1
		case a.Owner > b.Owner:
			return 1
		}
		return 0
	})
}

// Lookup is a store that reads the leases of given keys in bulk, strongly
// consistent, reading nothing else: a coordinator that knows its shards
// reads just their leases instead of scanning the table, which may hold
// other applications' and streams' items.
type Lookup interface {
	// GetMany returns the leases of keys that exist, sorted by key; a key
	// without a lease is left out.
	GetMany(ctx context.Context, keys []string) ([]Lease, error)
}

// ListCost is a store that knows what a List of a namespace costs, so that
// a coordinator that wants every lease of a namespace can read them the
// cheaper way: a List, or by key (Lookup). On DynamoDB a List is a
// strongly consistent Scan of the whole table, billed per 4 KB of the items
// it reads (about ten leases a read unit, with the items of every other
// namespace in the table), and a read by key a read unit per lease: the
// Scan is the cheaper unless the table holds many other items.
type ListCost interface {
	// ListUnits returns the read units the last List of namespace
	// consumed; ok is false when none has been measured.
	ListUnits(namespace string) (units float64, ok bool)
}

// CreateOrGetter is a store whose refused Create returns the lease that
// exists, so that instances creating the same leases at once (a fleet
// starting, a reshard every instance finds) need no read after each
// refusal: the DynamoDB store takes it from the refused write itself.
type CreateOrGetter interface {
	// CreateOrGet stores l if no lease has its key and returns it (created
	// is true), else returns the lease stored under the key, as a
	// strongly consistent read would (created is false), or an error
	// matching ErrNotFound if that was deleted in between.
	CreateOrGet(ctx context.Context, l Lease) (stored Lease, created bool, err error)
}
