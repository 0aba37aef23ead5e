package runtime

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Defaults of the broker's settings.
const (
	DefaultShardSyncInterval  = 10 * time.Second
	DefaultLeaseRenewInterval = 3 * time.Second
	DefaultFailoverTime       = 10 * time.Second
	DefaultCheckpointInterval = time.Second
	DefaultShutdownTimeout    = 30 * time.Second
	DefaultApplication        = "kinesisgen"
)

func defaultConfig() config {
	return config{
		app:             DefaultApplication,
		logger:          slog.New(defaultLogHandler{}),
		codec:           JSON,
		shardSync:       DefaultShardSyncInterval,
		leaseRenew:      DefaultLeaseRenewInterval,
		failover:        DefaultFailoverTime,
		checkpointEvery: DefaultCheckpointInterval,
		shutdownTimeout: DefaultShutdownTimeout,
		roster:          true,
	}
}

// WithEndpoint sends every Kinesis call to url (for example a local
// kinesalite) instead of the region's endpoint.
func WithEndpoint(url string) Option { return func(c *config) { c.endpoint = url } }

// WithRegion names the AWS region; without it the default chain's region is
// used (us-east-1 when an endpoint is named and the chain has none).
func WithRegion(region string) Option { return func(c *config) { c.region = region } }

// WithTestCredentials uses fixed dummy credentials, for local servers that
// accept any signature.
func WithTestCredentials() Option { return func(c *config) { c.testCredentials = true } }

// WithLeaseStore keeps shard leases and checkpoints in s (default: in memory,
// which suits a single process).
func WithLeaseStore(s lease.Store) Option { return func(c *config) { c.leases = s } }

// WithOwnerID names this broker in the lease store (default: host name plus
// a random suffix, unique per broker).
func WithOwnerID(id string) Option { return func(c *config) { c.owner = id } }

// WithLogger logs through l, at every level l enables. Without it the
// broker logs warnings and errors (a dead letter, a record checkpointed
// past, a lost lease, a failing call being retried) to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithKinesisClient makes Connect use api instead of building an SDK client;
// runtime/kinesistest injects its in-process backend this way.
func WithKinesisClient(api kinesisapi.API) Option { return func(c *config) { c.client = api } }

// WithApplication names the application; it prefixes lease namespaces so that
// several applications can share one lease store. A name is 1–128 of
// [a-zA-Z0-9_.-], like a stream name: lease keys are application/stream/shard,
// so a '/' in it would let one application's namespace take in another's
// leases. Connect (and Subscribe) refuse any other name with ErrInvalid; an
// empty name keeps the default.
func WithApplication(name string) Option {
	return func(c *config) {
		if name != "" {
			c.app = name
		}
	}
}

// checkApplication reports an application name that cannot be a lease
// namespace prefix, as an ErrInvalid error for op.
func checkApplication(app, op string) error {
	if msg := validateName("application", app); msg != "" {
		return &Error{Kind: ErrInvalid, Op: op, Err: fmt.Errorf("WithApplication: %s", msg)}
	}
	return nil
}

// WithCodec marshals messages with codec instead of JSON.
func WithCodec(codec Codec) Option {
	return func(c *config) {
		if codec != nil {
			c.codec = codec
		}
	}
}

// WithShardSyncInterval sets how often subscriptions re-list shards (10 s).
func WithShardSyncInterval(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.shardSync })
}

// WithLeaseRenewInterval sets how often a reader renews its lease (3 s).
func WithLeaseRenewInterval(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.leaseRenew })
}

// WithPerLeaseRenewal makes every subscription renew each lease it holds
// every renewal interval and ask the busiest instance for one lease per
// pass, as the Java KCL does (and this runtime did before it kept liveness
// per instance): for a table shared with instances that judge liveness by
// each lease's counter, such as older versions of this runtime. By default
// an instance with a lease.MemberStore writes one member entry per renewal
// interval instead, and a joining instance gets its whole share in one
// pass. Such a fleet sees an instance with this option only once it holds
// a lease: switch a running fleet to it (or back to an older version) by
// stopping every instance first, not one at a time (the README's
// Upgrading says why).
func WithPerLeaseRenewal() Option { return func(c *config) { c.perLease = true } }

// WithMembersRoster sets readWholeUpTo, shard.Config.RosterWhole, for
// the members roster every subscription with liveness per instance uses
// by default (shard.Config.Roster; issue 34): it reads the members at a
// cost that grows linearly with the instances, a roster version and a few
// ring successors' entries each pass, the whole member list only when the
// version moved, with a lease store that keeps the roster (lease.RosterOf:
// the DynamoDB store with the members table, the memory store; a KCL
// table or the members item keeps none, and the subscription runs without
// it). readWholeUpTo is the most members whose whole list is still read
// every pass (0: 48; negative: never). Instances with and without the
// roster share a table, so a rolling deploy may turn it on or off. It
// needs dynamodb:BatchGetItem and dynamodb:UpdateItem on the members
// table: a subscription refused them runs without it and logs a warning.
func WithMembersRoster(readWholeUpTo int) Option {
	return func(c *config) { c.roster, c.rosterWhole = true, readWholeUpTo }
}

// WithoutMembersRoster turns the members roster off: every pass reads the
// whole member list, a read unit per 4 KB of entries (about 100
// instances), so the fleet's reads grow with the square of its instances
// (docs/instances.md, Cost).
func WithoutMembersRoster() Option { return func(c *config) { c.roster = false } }

// WithFailoverTime sets how long an unrenewed lease stays its owner's (10 s).
func WithFailoverTime(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.failover })
}

// WithCheckpointInterval sets how often settled progress is persisted (1 s).
func WithCheckpointInterval(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.checkpointEvery })
}

// WithShutdownTimeout bounds how long Run's shutdown lets lanes finish (30 s).
func WithShutdownTimeout(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.shutdownTimeout })
}

// durationOpt ignores non-positive durations, so an unset flag keeps the default.
func durationOpt(d time.Duration, field func(*config) *time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			*field(c) = d
		}
	}
}

// WithPublishConcurrency sets how many PutRecords calls run at once per
// stream (default 4). More calls help a stream of many shards over a
// high-latency link; fewer make fuller batches when the service is the limit.
func WithPublishConcurrency(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.batch.maxInFlight = n
		}
	}
}

// WithPublishCallTimeout sets the deadline of one PutRecords call of up to
// 5 MiB (default 10 s); a larger request (up to 10 MiB) gets as much more. A call that ends without an answer is retried (its records may be
// stored twice), so a hung connection delays a key by at most this long.
func WithPublishCallTimeout(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.batch.callTimeout })
}

// WithPublishLinger sets how long a partial batch waits for more records
// while a call is in flight and another could start (default 1 ms).
func WithPublishLinger(d time.Duration) Option {
	return durationOpt(d, func(c *config) *time.Duration { return &c.batch.linger })
}
