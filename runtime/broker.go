package runtime

// OWNER: publish-side helper (issue 2). Contract skeleton; fill in.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Broker owns the connection to Kinesis. Constructors and options do no I/O;
// a copy of a Broker shares its connection.
type Broker struct{ s *state }

type config struct {
	endpoint        string
	region          string
	testCredentials bool
	awsConfig       *aws.Config    // NewBrokerFromConfig
	client          kinesisapi.API // WithKinesisClient (kinesistest)
	leases          lease.Store    // default: lease.NewMemory()
	owner           string         // default: unique per broker
	app             string         // lease namespace prefix, default "kinesisgen"
	logger          *slog.Logger   // default: discard
	codec           Codec          // default: JSON
	shardSync       time.Duration  // 10 s
	leaseRenew      time.Duration  // 3 s
	failover        time.Duration  // 10 s
	checkpointEvery time.Duration  // how often settled progress is persisted
	shutdownTimeout time.Duration  // bound on letting lanes finish
}

type state struct {
	cfg  config
	mu   sync.Mutex
	conn *conn           // nil before Connect
	subs []*Subscription // registered (Mount) or running
}

// conn is one Connect's worth of live state.
type conn struct {
	client kinesisapi.API
	leases lease.Store
	owner  string
}

// Option configures a Broker.
type Option func(*config)

func NewBroker(opts ...Option) *Broker { panic("TODO issue 2") }

func NewBrokerFromConfig(cfg aws.Config, opts ...Option) *Broker { panic("TODO issue 2") }

// connection returns the live connection, or ErrNotConnected.
func (b *Broker) connection() (*conn, error) { panic("TODO issue 2") }

func (b *Broker) Connect(ctx context.Context) error  { panic("TODO issue 2") }
func (b *Broker) Shutdown(ctx context.Context) error { panic("TODO issue 2") }
func (b *Broker) Run(ctx context.Context) error      { panic("TODO issue 2") }

// Outgoing is one record on its way to a stream, its key already resolved.
type Outgoing struct {
	Stream       string
	PartitionKey string
	Headers      Headers // without partition-key; encoded in the envelope when non-empty
	Payload      []byte
}

// put sends one record through the batcher and waits for its own result.
func (c *conn) put(ctx context.Context, rec Outgoing) (Receipt, error) { panic("TODO issue 2") }
