package shard

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Every remote call of the coordinator has a deadline, so an endpoint that
// takes a request and never answers costs one call, never the coordinator:
// renewal, taking, shard sync and Stop go on (issue 9, scenario 10).
//
// A lease-store call gets a third of the failover time: a renewal that
// hangs leaves time for more attempts before the lease would expire. A
// Kinesis call gets the failover time, at least minKinesisCall (a local
// server under load is slow to answer GetShardIterator) and at most
// callTimeout.
const minKinesisCall = time.Second

func (cfg *Config) leaseCallTimeout() time.Duration { return cfg.Failover / 3 }

func (cfg *Config) kinesisCallTimeout() time.Duration {
	return min(max(cfg.Failover, minKinesisCall), callTimeout)
}

// boundedStore gives every call of a lease store its own deadline.
type boundedStore struct {
	s lease.Store
	d time.Duration
}

var _ lease.Store = boundedStore{}

// tableEnsurer is a store that checks (or creates) its table on first use
// (the DynamoDB store): Start does that once, bounded by its own ctx, since
// creating a table takes longer than any call.
type tableEnsurer interface {
	EnsureTable(ctx context.Context) error
}

func (b boundedStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.List(ctx, ns)
}

func (b boundedStore) Get(ctx context.Context, key string) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Get(ctx, key)
}

func (b boundedStore) Create(ctx context.Context, l lease.Lease) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Create(ctx, l)
}

func (b boundedStore) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Take(ctx, l, owner)
}

func (b boundedStore) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Renew(ctx, l)
}

func (b boundedStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Checkpoint(ctx, l, cp, sub)
}

func (b boundedStore) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Release(ctx, l)
}

func (b boundedStore) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.RequestHandoff(ctx, l, to)
}

func (b boundedStore) SetChildren(ctx context.Context, l lease.Lease, children []string) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.SetChildren(ctx, l, children)
}

func (b boundedStore) Delete(ctx context.Context, l lease.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.s.Delete(ctx, l)
}

// boundedMembers gives every call of a member store its own deadline.
type boundedMembers struct {
	boundedStore
	m lease.MemberStore
}

func (b boundedMembers) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.m.Heartbeat(ctx, ns, m)
}

func (b boundedMembers) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.m.Members(ctx, ns)
}

func (b boundedMembers) Leave(ctx context.Context, ns, owner string, beat int64) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.m.Leave(ctx, ns, owner, beat)
}

// boundedRoster gives every call of a roster store its own deadline.
type boundedRoster struct {
	boundedMembers
	r lease.RosterStore
}

func (b boundedRoster) RosterVersion(ctx context.Context, ns string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.r.RosterVersion(ctx, ns)
}

func (b boundedRoster) BumpRoster(ctx context.Context, ns string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.r.BumpRoster(ctx, ns)
}

func (b boundedRoster) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.r.MembersByOwner(ctx, ns, owners)
}

func (b boundedRoster) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.r.DeclareDead(ctx, ns, owner, beat)
}

// boundedNotices is boundedRoster over a store whose version item carries
// notices (lease.RosterNotices).
type boundedNotices struct {
	boundedRoster
	n lease.RosterNotices
}

func (b boundedNotices) WatchRoster(ctx context.Context, ns string, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.n.WatchRoster(ctx, ns, owners)
}

func (b boundedNotices) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.n.PostNotice(ctx, ns, n)
}

func (b boundedNotices) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.n.WithdrawNotice(ctx, ns, n)
}

// boundedLookup gives every GetMany its own deadline.
type boundedLookup struct {
	l lease.Lookup
	d time.Duration
}

func (b boundedLookup) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.l.GetMany(ctx, keys)
}

// boundedCreator gives every CreateOrGet its own deadline.
type boundedCreator struct {
	c lease.CreateOrGetter
	d time.Duration
}

func (b boundedCreator) CreateOrGet(ctx context.Context, l lease.Lease) (lease.Lease, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.CreateOrGet(ctx, l)
}

// boundedClient gives every Kinesis call its own deadline (a caller's
// shorter one still applies).
type boundedClient struct {
	kinesisapi.API
	d time.Duration
}

// boundedWaiter is a boundedClient over a backend that can say when a shard
// has a record (the in-process Kinesis); the wait itself is local.
type boundedWaiter struct {
	boundedClient
	w recordWaiter
}

func (b boundedWaiter) WaitForRecords(ctx context.Context, shardIterator string) error {
	return b.w.WaitForRecords(ctx, shardIterator)
}

func boundClient(api kinesisapi.API, d time.Duration) kinesisapi.API {
	b := boundedClient{API: api, d: d}
	if w, ok := api.(recordWaiter); ok {
		return boundedWaiter{boundedClient: b, w: w}
	}
	return b
}

func (b boundedClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.API.ListShards(ctx, in, o...)
}

func (b boundedClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.API.GetShardIterator(ctx, in, o...)
}

func (b boundedClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.API.GetRecords(ctx, in, o...)
}

func (b boundedClient) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.API.DescribeStreamSummary(ctx, in, o...)
}
