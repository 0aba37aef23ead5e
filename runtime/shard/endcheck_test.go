package shard_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The read-path scenarios of a fan-out reader's end check: on a server
// whose subscription of a closed shard never ends (kinesis-mock), the
// reader confirms the end with GetRecords (the only GetRecords calls a
// fan-out reader makes). Stop, a lost lease and a failed call during that
// check must neither finish the shard nor lose or repeat a record, and
// what a check finds must settle before the shard is finished.

// endChecks is the coordinators' client: it holds the end check's
// GetRecords (and, when fail is set, fails it) and can start the check
// from the shard's horizon, as if the subscription's last continuation
// were behind records it never sent.
type endChecks struct {
	kinesisapi.API
	hold    atomic.Bool // hold the next GetRecords until release (ctx or not)
	obeyCtx bool        // a held call ends with its ctx
	fail    atomic.Int32
	rewind  atomic.Bool // the check's iterator starts at the horizon
	held    chan struct{}
	release chan struct{}
	once    sync.Once
	calls   atomic.Int32
}

func newEndChecks(api kinesisapi.API) *endChecks {
	return &endChecks{API: api, held: make(chan struct{}), release: make(chan struct{})}
}

func (c *endChecks) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if c.rewind.Load() {
		cp := *in
		cp.ShardIteratorType, cp.StartingSequenceNumber = types.ShardIteratorTypeTrimHorizon, nil
		in = &cp
	}
	return c.API.GetShardIterator(ctx, in, o...)
}

func (c *endChecks) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.calls.Add(1)
	if c.hold.Load() {
		c.once.Do(func() { close(c.held) })
		if c.obeyCtx {
			select {
			case <-c.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		} else {
			<-c.release
		}
	}
	if c.fail.Load() > 0 {
		c.fail.Add(-1)
		return nil, &types.ExpiredIteratorException{Message: aws.String("injected")}
	}
	// The answer of a held call is read after the fence, whatever its ctx.
	return c.API.GetRecords(context.WithoutCancel(ctx), in, o...)
}

// endCheckEnv is a one-shard fan-out env on a server whose subscriptions
// of closed shards never end, its coordinators' calls going through
// checks, and the config of a reader from the horizon that logs warnings
// to logs and delivers to col.
func endCheckEnv(t *testing.T) (e *env, srv *kinesistest.Server, checks *endChecks, cfg shard.Config, col *collector, logs *syncBuffer) {
	e, srv = fanEnv(t, 1, kinesistest.WithSubscriptionIgnoringShardEnd())
	checks = newEndChecks(srv)
	e.coordClient = checks
	logs, col = &syncBuffer{}, newCollector()
	cfg = e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return e, srv, checks, cfg, col, logs
}

// splitUnderReader publishes 10 records to e's one shard, waits until col
// has them and the checkpoint is at the last, then splits the shard; it
// returns the parent's id.
func splitUnderReader(t *testing.T, e *env, srv *kinesistest.Server, col *collector) string {
	t.Helper()
	parent := e.shards()[0]
	want := map[string]int{}
	e.publish(want, 10, 2)
	last := col.waitN(t, 10)[9].SequenceNumber
	eventually(t, 5*time.Second, "the checkpoint at the last record", func() bool { return e.lease(parent).Checkpoint == last })
	if err := srv.SplitInHalf(e.stream, parent); err != nil {
		t.Fatal(err)
	}
	return parent
}

func waitHeld(t *testing.T, c *endChecks) {
	t.Helper()
	select {
	case <-c.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no end check within 10s of the split")
	}
}

// Stop while the end check's GetRecords hangs: Stop ends it at once; the
// parent is not finished (its checkpoint stays at its last record), no
// failure is logged, and the next owner finishes the parent, delivering
// none of its records again, and reads the children.
func TestStopDuringAFanOutEndCheck(t *testing.T) {
	e, srv, checks, cfg, col, logs := endCheckEnv(t)
	checks.obeyCtx = true
	checks.hold.Store(true)
	// A failover time a loaded machine cannot outrun: the log must hold
	// nothing, and a heartbeat starved past 500 ms fences with a warning
	// that says nothing of the stop (CI, 2 cores, every package at once).
	cfg.Failover = 5 * time.Second
	a := e.startStopped(cfg)
	parent := splitUnderReader(t, e, srv, col)
	last := e.lease(parent).Checkpoint
	waitHeld(t, checks)

	began := time.Now()
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Stop took %s to end a reader in its end check", took)
	}
	if cp := e.lease(parent).Checkpoint; cp != last {
		t.Errorf("parent's checkpoint %q after Stop, want its last record's %q (not finished by a check that never answered)", cp, last)
	}
	if logs.String() != "" {
		t.Errorf("the stop logged:\n%s", logs.String())
	}

	e.coordClient = nil
	col2 := newCollector()
	cfg2 := e.config("b", col2.sink)
	cfg2.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg2)
	eventually(t, 15*time.Second, "the parent finished by the next owner", func() bool {
		return e.lease(parent).Checkpoint == lease.CheckpointShardEnd
	})
	want := map[string]int{}
	e.publish(want, 10, 2)
	got := col2.waitN(t, 10)
	for _, r := range got {
		if r.ShardID == parent {
			t.Errorf("the next owner delivered the parent's %s again", r.Data)
		}
	}
}

// A check whose GetRecords fails (here an expired iterator, twice) is
// logged and left to the next check; the subscription goes on meanwhile,
// and the parent is finished and its children read once a check answers.
func TestFailedFanOutEndCheckIsTriedAgain(t *testing.T) {
	e, srv, checks, cfg, col, logs := endCheckEnv(t)
	checks.fail.Store(2)
	e.start(cfg)
	parent := splitUnderReader(t, e, srv, col)
	eventually(t, 20*time.Second, "the parent finished after two failed checks", func() bool {
		return e.lease(parent).Checkpoint == lease.CheckpointShardEnd
	})
	if n := strings.Count(logs.String(), "checking the end of a closed shard failed"); n != 2 {
		t.Errorf("%d failed checks logged, want 2:\n%s", n, logs.String())
	}
	want := map[string]int{"k0": 5, "k1": 5}
	e.publish(want, 10, 2)
	col.waitN(t, 20)
	time.Sleep(500 * time.Millisecond) // a repeat would be here by now
	checkKeyOrder(t, col.records(), want)
}

// A reader fenced while its end check's GetRecords is out hands out none
// of what that call answers, and does not finish the shard; taken back, it
// finishes the parent and reads the children. The check here starts at
// the horizon, so its answer holds records (a server whose subscription
// skipped them): were they handed out after the fence, the collector
// would have them.
func TestFencedDuringAFanOutEndCheck(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, srv := fanEnv(t, 1, kinesistest.WithSubscriptionIgnoringShardEnd())
		e.liveness = l
		checks := newEndChecks(srv)
		e.coordClient = checks
		col := newCollector()
		a, store := fencedOwner(e, "a", col)
		eventually(t, 5*time.Second, "a reads the shard", func() bool { return len(a.Reading()) == 1 })
		checks.hold.Store(true)
		checks.rewind.Store(true)
		parent := splitUnderReader(t, e, srv, col)
		waitHeld(t, checks)

		fence(t, a, store)
		before := len(col.records())
		close(checks.release)
		time.Sleep(time.Second) // the answer would be handed out by now
		if got := col.records()[before:]; len(got) > 0 {
			t.Fatalf("the fenced reader handed out %d records of its end check, first %s", len(got), got[0].Data)
		}
		if cp := e.lease(parent).Checkpoint; cp == lease.CheckpointShardEnd {
			t.Fatal("the fenced reader finished the parent")
		}

		checks.hold.Store(false)
		checks.rewind.Store(false)
		store.off.Store(false)
		eventually(t, 15*time.Second, "the parent finished once a takes it back", func() bool {
			return e.lease(parent).Checkpoint == lease.CheckpointShardEnd
		})
		want := map[string]int{"k0": 5, "k1": 5}
		e.publish(want, 10, 2)
		col.waitN(t, 20)
		time.Sleep(500 * time.Millisecond) // a repeat would be here by now
		checkKeyOrder(t, col.records(), want)
	})
}

// Records a check finds are delivered, and the shard is finished only once
// they are settled: SHARD_END never passes a record a check handed out.
// The check here starts at the horizon (as if the subscription had skipped
// the parent's records), so it finds all ten again.
func TestFanOutEndCheckSettlesWhatItFindsBeforeFinishing(t *testing.T) {
	e, srv, checks, cfg, col, _ := endCheckEnv(t)
	seen := map[string]bool{}
	col.hold = func(r *shard.Record) bool { // the second delivery of each: the check's
		again := seen[r.SequenceNumber]
		seen[r.SequenceNumber] = true
		return again
	}
	checks.rewind.Store(true)
	e.start(cfg)
	parent := splitUnderReader(t, e, srv, col)
	found := col.waitN(t, 20)[10:]
	time.Sleep(time.Second) // a finish would be written by now
	if cp := e.lease(parent).Checkpoint; cp == lease.CheckpointShardEnd {
		t.Fatal("the parent was finished while the records its check found were unsettled")
	}
	checks.rewind.Store(false)
	for _, r := range found {
		r.Settle()
	}
	eventually(t, 10*time.Second, "the parent finished once they settle", func() bool {
		return e.lease(parent).Checkpoint == lease.CheckpointShardEnd
	})
	want := map[string]int{}
	e.publish(want, 10, 2)
	got := col.waitN(t, 30)[20:]
	time.Sleep(500 * time.Millisecond) // a repeat would be here by now
	checkKeyOrder(t, got, want)
	if n := len(col.records()); n != 30 {
		t.Errorf("%d deliveries, want the parent's 10 twice and the children's 10 once", n)
	}
}
