package kbench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/sirupsen/logrus"
	"github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	"github.com/vmware/vmware-go-kcl-v2/clientlibrary/config"
	"github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	"github.com/vmware/vmware-go-kcl-v2/clientlibrary/worker"
	"github.com/vmware/vmware-go-kcl-v2/logger"
)

// DynamoClient is an SDK DynamoDB client on cfg, pointed at endpoint.
func DynamoClient(cfg aws.Config, endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// GoKCL describes a github.com/vmware/vmware-go-kcl-v2 worker for a
// benchmark: the stream, a lease table of its own in DynamoDB, the clients
// (so every consumer's calls go through clients built the same way) and the
// KCL settings a benchmark changes.
type GoKCL struct {
	Stream   string
	Table    string // its lease table; the worker creates it when missing
	Kinesis  *kinesis.Client
	DynamoDB *dynamodb.Client
	Horizon  bool // TRIM_HORIZON, else LATEST (its default)
	// ShardSync is its ShardSyncIntervalMillis: the pause of its event loop,
	// jittered by ±50 %, which takes at most one new lease per pass.
	ShardSync time.Duration
	// Log receives its warnings and errors (its default logger writes every
	// Info line to stdout); nil discards them.
	Log io.Writer
}

// StartGoKCL starts a worker reading g.Stream whose record processor
// decodes each record's JSON, hands the Event to fn and checkpoints the
// batch's last sequence number once fn has returned for all of it, as the
// processor in the library's tests does. A record that does not decode is
// reported on the returned channel (once) and skipped. Stop the worker with
// its Shutdown.
func StartGoKCL(g GoKCL, fn func(Event)) (*worker.Worker, <-chan error, error) {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	log.SetOutput(io.Discard)
	if g.Log != nil {
		log.SetOutput(g.Log)
	}
	cfg := config.NewKinesisClientLibConfig(g.Table, g.Stream, "us-east-1", "").
		WithTableName(g.Table).
		WithLogger(logger.NewLogrusLogger(log))
	if g.Horizon {
		cfg = cfg.WithInitialPositionInStream(config.TRIM_HORIZON)
	}
	if g.ShardSync > 0 {
		cfg = cfg.WithShardSyncIntervalMillis(int(g.ShardSync.Milliseconds()))
	}
	errs := make(chan error, 1)
	w := worker.NewWorker(processorFactory{fn: fn, errs: errs}, cfg).
		WithKinesis(g.Kinesis).
		WithCheckpointer(checkpoint.NewDynamoCheckpoint(cfg).WithDynamoDB(g.DynamoDB))
	if err := w.Start(); err != nil {
		return nil, nil, err
	}
	return w, errs, nil
}

type processorFactory struct {
	fn   func(Event)
	errs chan<- error
}

func (f processorFactory) CreateProcessor() interfaces.IRecordProcessor {
	return &processor{processorFactory: f}
}

type processor struct {
	processorFactory
	shard string
}

func (p *processor) Initialize(in *interfaces.InitializationInput) { p.shard = in.ShardId }

func (p *processor) ProcessRecords(in *interfaces.ProcessRecordsInput) {
	for i := range in.Records {
		var e Event
		if err := json.Unmarshal(in.Records[i].Data, &e); err != nil {
			p.fail(fmt.Errorf("shard %s: %w", p.shard, err))
			continue
		}
		p.fn(e)
	}
	if n := len(in.Records); n > 0 {
		if err := in.Checkpointer.Checkpoint(in.Records[n-1].SequenceNumber); err != nil {
			p.fail(fmt.Errorf("shard %s: checkpoint: %w", p.shard, err))
		}
	}
}

// Shutdown checkpoints the end of a closed shard, as the KCL requires.
func (p *processor) Shutdown(in *interfaces.ShutdownInput) {
	if in.ShutdownReason == interfaces.TERMINATE {
		if err := in.Checkpointer.Checkpoint(nil); err != nil {
			p.fail(fmt.Errorf("shard %s: final checkpoint: %w", p.shard, err))
		}
	}
}

func (p *processor) fail(err error) {
	select {
	case p.errs <- err:
	default:
	}
}
