package shard_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// env is one stream on one backend with one lease store.
type env struct {
	t      *testing.T
	client kinesisapi.API
	stream string
	store  lease.Store
	live   bool
	slow   int // a live server's livetest.KinesisServer.Slow (0: in-process)
	// consumerARN, when set, makes config read by enhanced fan-out
	// through this stream consumer (fanEnv).
	consumerARN string
	// coordClient, when set, is the coordinators' client (config), apart
	// from client, which the test publishes and reshards with.
	coordClient kinesisapi.API
	// liveness is config's Liveness (LivenessAuto unless a test runs in
	// each mode: eachLiveness).
	liveness shard.Liveness
}

var streamSeq atomic.Int64

func memEnv(t *testing.T, shards int32) (*env, *kinesistest.Server) {
	srv := kinesistest.New()
	e := &env{t: t, client: srv, store: lease.NewMemory()}
	e.create(shards)
	return e, srv
}

func (e *env) create(shards int32) {
	e.t.Helper()
	e.stream = fmt.Sprintf("shard-test-%s-%d-%d", strings.ReplaceAll(e.t.Name(), "/", "-"), time.Now().UnixNano()%1e6, streamSeq.Add(1))
	if len(e.stream) > 128 {
		e.stream = e.stream[len(e.stream)-128:]
	}
	ctx := e.ctx(30 * time.Second)
	if _, err := e.client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(e.stream), ShardCount: aws.Int32(shards)}); err != nil {
		e.t.Fatalf("CreateStream: %v", err)
	}
	for {
		out, err := e.client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(e.stream)})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == "ACTIVE" {
			break
		}
		if ctx.Err() != nil {
			e.t.Fatalf("stream %s not active: %v", e.stream, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e.live {
		e.t.Cleanup(func() {
			_, _ = e.client.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(e.stream)})
		})
	}
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// put publishes key's n-th record and returns where it landed.
func (e *env) put(key string, n int) (shardID, seq string) {
	e.t.Helper()
	out, err := e.client.PutRecord(e.ctx(10*time.Second), &kinesis.PutRecordInput{
		StreamName: aws.String(e.stream), PartitionKey: aws.String(key), Data: []byte(key + ":" + strconv.Itoa(n)),
	})
	if err != nil {
		e.t.Fatalf("PutRecord: %v", err)
	}
	return aws.ToString(out.ShardId), aws.ToString(out.SequenceNumber)
}

// publish puts n records over the keys k0..k(keys-1) in turn, numbering
// each key's records on from its count in want, and counts them in want.
func (e *env) publish(want map[string]int, n, keys int) {
	e.t.Helper()
	for i := range n {
		key := fmt.Sprintf("k%d", i%keys)
		e.put(key, want[key])
		want[key]++
	}
}

func (e *env) shards() []string {
	e.t.Helper()
	out, err := e.client.ListShards(e.ctx(10*time.Second), &kinesis.ListShardsInput{StreamName: aws.String(e.stream)})
	if err != nil {
		e.t.Fatalf("ListShards: %v", err)
	}
	var ids []string
	for _, s := range out.Shards {
		if s.SequenceNumberRange.EndingSequenceNumber == nil {
			ids = append(ids, aws.ToString(s.ShardId))
		}
	}
	return ids
}

// config is a coordinator config with intervals small enough for tests.
func (e *env) config(owner string, sink shard.Sink) shard.Config {
	return shard.Config{
		Stream:      e.stream,
		Namespace:   "test/" + e.stream,
		Client:      cmp.Or(e.coordClient, e.client),
		Leases:      e.store,
		Owner:       owner,
		Sink:        sink,
		Poll:        200 * time.Millisecond,
		Sync:        100 * time.Millisecond,
		Renew:       50 * time.Millisecond,
		Failover:    time.Duration(max(e.slow, 1)) * time.Second, // also bounds each Kinesis call (at least 1 s)
		Checkpoint:  20 * time.Millisecond,
		Logger:      testLogger(),
		ConsumerARN: e.consumerARN,
		Liveness:    e.liveness,
	}
}

// testLogger discards, unless SHARD_TEST_LOG is set to see the
// coordinators' debug log on stderr.
func testLogger() *slog.Logger {
	if os.Getenv("SHARD_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startStopped is e.start for a test that stops the coordinator itself and
// checks what that Stop did: no Stop at cleanup.
func (e *env) startStopped(cfg shard.Config) *shard.Coordinator {
	e.t.Helper()
	c := e.newCoordinator(cfg)
	if err := c.Start(e.ctx(30 * time.Second)); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	return c
}

// newCoordinator is shard.New(cfg) for a test that starts it itself. Its
// lease counts are logged if the test fails: a failed count of deliveries
// or leases is told from a lease lost to a loaded machine's stall (which
// rightly delivers again, or leaves a lease to expire) there.
func (e *env) newCoordinator(cfg shard.Config) *shard.Coordinator {
	e.t.Helper()
	if cfg.Counters == nil {
		cfg.Counters = new(shard.LeaseCounters)
	}
	t, counters := e.t, cfg.Counters
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("owner %s: %d leases taken, %d lost (fenced or taken), %d handed over", cfg.Owner,
				counters.Taken.Load(), counters.Lost.Load(), counters.HandedOver.Load())
		}
	})
	c, err := shard.New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return c
}

// feed waits until c reads every shard of ids, publishes n records over
// keys keys and waits until col has them; it returns the records per key.
func (e *env) feed(c *shard.Coordinator, ids []string, col *collector, n, keys int) map[string]int {
	e.t.Helper()
	eventually(e.t, 5*time.Second, "the owner reads every shard", func() bool { return slices.Equal(c.Reading(), ids) })
	want := map[string]int{}
	e.publish(want, n, keys)
	col.waitN(e.t, n)
	return want
}

// start starts a coordinator and stops it when the test ends.
func (e *env) start(cfg shard.Config) *shard.Coordinator {
	e.t.Helper()
	c := e.startStopped(cfg)
	e.t.Cleanup(func() {
		// Bounded: a test may leave records unsettled on purpose.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func (e *env) lease(shardID string) lease.Lease {
	e.t.Helper()
	l, err := e.store.Get(context.Background(), lease.KeyFor("test/"+e.stream, shardID))
	if err != nil {
		e.t.Fatalf("lease of %s: %v", shardID, err)
	}
	return l
}

// collector is a sink that records every delivery, settling at once unless
// hold says otherwise.
type collector struct {
	mu   sync.Mutex
	got  []*shard.Record
	hold func(*shard.Record) bool
	ch   chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1)} }

// newCollectors returns collectors that wake each other's waits: a wait on
// one for a condition over all of them sees every delivery.
func newCollectors(n int) []*collector {
	ch := make(chan struct{}, 1)
	out := make([]*collector, n)
	for i := range out {
		out[i] = &collector{ch: ch}
	}
	return out
}

func (c *collector) sink(_ context.Context, rs []shard.Record) (int, error) {
	for i := range rs {
		r := new(shard.Record)
		*r = rs[i] // the sink keeps copies: rs is the reader's buffer
		c.mu.Lock()
		c.got = append(c.got, r)
		hold := c.hold != nil && c.hold(r)
		c.mu.Unlock()
		if !hold {
			r.Settle()
		}
	}
	select {
	case c.ch <- struct{}{}:
	default:
	}
	return len(rs), nil
}

func (c *collector) records() []*shard.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*shard.Record(nil), c.got...)
}

// wait blocks until cond holds for the deliveries so far.
func (c *collector) wait(t *testing.T, d time.Duration, what string, cond func([]*shard.Record) bool) []*shard.Record {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		recs := c.records()
		if cond(recs) {
			return recs
		}
		select {
		case <-c.ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; got %d deliveries: %s", d, what, len(recs), dataOf(recs))
		}
	}
}

func (c *collector) waitN(t *testing.T, n int) []*shard.Record {
	t.Helper()
	return c.wait(t, 20*time.Second, fmt.Sprintf("%d deliveries", n), func(r []*shard.Record) bool { return len(r) >= n })
}

func dataOf(recs []*shard.Record) string {
	var b strings.Builder
	for i, r := range recs {
		if i == 20 {
			b.WriteString(" ...")
			break
		}
		b.WriteString(" " + string(r.Data))
	}
	return b.String()
}

// eventually polls cond (state in another component that has no event to
// wait on) until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recordID identifies a record: sequence numbers are unique only within a
// shard.
type recordID struct{ shard, seq string }

func idOf(r *shard.Record) recordID { return recordID{r.ShardID, r.SequenceNumber} }

// checkKeyOrder asserts that exactly the keys of want were delivered, each
// key's records in publish order with none missing or repeated.
func checkKeyOrder(t *testing.T, recs []*shard.Record, want map[string]int) {
	t.Helper()
	next := map[string]int{}
	for _, r := range recs {
		key, nstr, _ := strings.Cut(string(r.Data), ":")
		n, _ := strconv.Atoi(nstr)
		if _, ok := want[key]; !ok {
			t.Fatalf("record %s of an unexpected key delivered (shard %s)", r.Data, r.ShardID)
		}
		if n != next[key] {
			t.Fatalf("key %s: got record %d, want %d (order broken or record lost/duplicated); shard %s seq %s", key, n, next[key], r.ShardID, r.SequenceNumber)
		}
		next[key]++
	}
	for k, n := range want {
		if next[k] != n {
			t.Errorf("key %s: %d records delivered, want %d", k, next[k], n)
		}
	}
}

// memberWrap gives a test's wrapping store (which embeds lease.Store, and
// so hides the members of the store it wraps) the members of inner, so
// that its coordinator keeps liveness per instance like the others.
type memberWrap struct {
	lease.Store
	m lease.MemberStore
}

func (w memberWrap) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	return w.m.Heartbeat(ctx, ns, m)
}

func (w memberWrap) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	return w.m.Members(ctx, ns)
}

func (w memberWrap) Leave(ctx context.Context, ns, owner string, beat int64) error {
	return w.m.Leave(ctx, ns, owner, beat)
}

// withMembers returns wrapper with the members of inner, when inner keeps
// them.
func withMembers(wrapper, inner lease.Store) lease.Store {
	if m, ok := lease.MembersOf(inner); ok {
		return memberWrap{Store: wrapper, m: m}
	}
	return wrapper
}
