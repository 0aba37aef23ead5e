package fleettest

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/faultproxy"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// The fault mixes' workload: three workers on a 4-shard stream, each
// publishing a third of the keys and all of them consuming.
const (
	mixWorkers = 3
	mixKeys    = 90
	mixPerKey  = 30 // 2,700 records per mix
	// mixPause spreads a key's records over about 6 s, so the faults meet
	// records in flight, checkpoints and renewals alike.
	mixPause = 200 * time.Millisecond
	// publishTimeout bounds each publish call of a worker; a call must
	// return within it plus publishSlack (a loaded machine under -race).
	publishTimeout = 5 * time.Second
	publishSlack   = 2 * time.Second
)

// faultMix is one scenario: the rules every worker's proxies get (only w1's
// when isolate is set), from `after` into the publishing on.
type faultMix struct {
	name            string
	kinesis, dynamo []faultproxy.Rule
	isolate         bool
	after           time.Duration
	// What at-least-once allows under the mix: a record stored twice (a
	// PutRecords applied whose answer was lost, published again), a record
	// delivered again (a lease or an iterator lost).
	storedTwice, redelivered bool
}

var allKinesisOps = []string{"PutRecords", "GetRecords", "GetShardIterator", "ListShards", "DescribeStreamSummary"}

// faultMixes are the scenarios of issue 9's "Faults, proven in the suite".
func faultMixes() []faultMix {
	return []faultMix{
		{
			name:    "kinesis-throttling",
			kinesis: []faultproxy.Rule{{Ops: allKinesisOps, Fault: faultproxy.Throttle, Rate: 0.25}},
		},
		{
			name:    "kinesis-internal-failures",
			kinesis: []faultproxy.Rule{{Ops: allKinesisOps, Fault: faultproxy.InternalFailure, Rate: 0.15}},
		},
		{
			name: "kinesis-resets",
			kinesis: []faultproxy.Rule{
				{Ops: []string{"PutRecords", "GetRecords"}, Fault: faultproxy.ResetAfter, Rate: 0.1},
				{Fault: faultproxy.ResetBefore, Rate: 0.05},
			},
			storedTwice: true, // a PutRecords stored, its answer lost, sent again
		},
		{
			name: "latency",
			kinesis: []faultproxy.Rule{
				{Fault: faultproxy.Latency, Rate: 0.3, Delay: 50 * time.Millisecond},
				{Fault: faultproxy.Latency, Rate: 0.03, Delay: time.Second},
			},
			dynamo: []faultproxy.Rule{
				{Fault: faultproxy.Latency, Rate: 0.3, Delay: 50 * time.Millisecond},
				{Fault: faultproxy.Latency, Rate: 0.03, Delay: time.Second},
			},
		},
		{
			name:        "expired-iterators",
			kinesis:     []faultproxy.Rule{{Ops: []string{"GetRecords"}, Fault: faultproxy.ExpireIterator, Rate: 0.3}},
			redelivered: true, // a reader may reopen at its checkpoint
		},
	}
}

// TestFaults runs the fleet's workers through a fault-injecting proxy in
// front of kinesalite and dynalite, one scenario per fault mix, and checks
// what every record went through: none lost, no key handled out of order by
// one owner, duplicates only where the mix allows them, every worker up to
// the end and every publish call back within its deadline.
func TestFaults(t *testing.T) {
	kinesisURL := livetest.KinesisEndpoint(t)
	dynamoURL := livetest.DynamoDBEndpoint(t)
	bin := buildWorker(t)
	only := os.Getenv("FAULTS_MIX") // one mix by name, to measure it alone
	for _, m := range faultMixes() {
		if only != "" && only != m.name {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			runMix(t, m, bin, kinesisURL, dynamoURL)
		})
	}
}

// mixFleet is one mix's workers, proxies and what they printed.
type mixFleet struct {
	t       *testing.T
	mix     faultMix
	bin     string
	base    *fleet // the stream, the lease table and their clients
	kinesis map[string]*faultproxy.Proxy
	dynamo  map[string]*faultproxy.Proxy

	mu        sync.Mutex
	procs     map[string]*mixProc
	seen      map[record][]sighting
	calls     []Published
	pubDone   map[string]bool
	published map[record]bool
	problems  []string
	changed   chan struct{}
}

type mixProc struct {
	owner    string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stderr   string
	lines    int
	exited   chan struct{}
	exitErr  error
	stopping bool
}

func runMix(t *testing.T, m faultMix, bin, kinesisURL, dynamoURL string) {
	// 8–25 s per mix on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	f := &mixFleet{
		t: t, mix: m, bin: bin,
		base:      &fleet{t: t, kinesis: kinesisURL, dynamo: dynamoURL, stream: "faults-" + suffix, table: "faults-leases-" + suffix},
		kinesis:   make(map[string]*faultproxy.Proxy),
		dynamo:    make(map[string]*faultproxy.Proxy),
		procs:     make(map[string]*mixProc),
		seen:      make(map[record][]sighting),
		pubDone:   make(map[string]bool),
		published: make(map[record]bool),
		changed:   make(chan struct{}),
	}
	f.base.setup(ctx)
	owners := make([]string, mixWorkers)
	for i := range owners {
		owners[i] = fmt.Sprintf("w%d", i+1)
		f.kinesis[owners[i]] = f.proxy(kinesisURL, m.name+"/kinesis/"+owners[i])
		f.dynamo[owners[i]] = f.proxy(dynamoURL, m.name+"/dynamodb/"+owners[i])
	}
	for _, o := range owners {
		f.start(o)
	}
	f.awaitBalanced(ctx)

	start := time.Now()
	for i, o := range owners {
		f.command(o, PublishCommand{First: i, Stride: mixWorkers, Keys: mixKeys, From: 0, N: mixPerKey, Pause: mixPause})
	}
	if m.after > 0 {
		f.sleep(ctx, m.after)
	}
	f.setRules(owners)
	f.awaitDone(ctx)
	took := time.Since(start)
	f.clearRules()
	for _, o := range owners {
		f.terminate(o)
	}
	if dir := os.Getenv("FLEETTEST_LOGDIR"); dir != "" {
		f.dump(filepath.Join(dir, m.name+"-handled.txt"))
	}
	r := f.check()
	t.Logf("FAULTS mix=%s published=%d handled=%d lost=%d dup_stored_twice=%d dup_redelivered=%d order_violations=%d two_owners_at_once=%d publish_calls=%d publish_errors=%d publish_max=%.2fs took=%.1fs injected: %s",
		m.name, r.published, r.handled, r.lost, r.storedTwice, r.redelivered, r.orderViolations, r.twoOwners,
		r.publishCalls, r.publishErrors, r.publishMax.Seconds(), took.Seconds(), f.injected())
}

// proxy starts a proxy whose seed comes from its name, so a mix makes the
// same decisions every run.
func (f *mixFleet) proxy(upstream, name string) *faultproxy.Proxy {
	h := fnv.New64a()
	_, _ = io.WriteString(h, name)
	p, err := faultproxy.New(upstream, h.Sum64())
	if err != nil {
		f.t.Fatal(err)
	}
	// Registered before the workers' cleanups, so it runs after them.
	f.t.Cleanup(func() { _ = p.Close() })
	return p
}

func (f *mixFleet) setRules(owners []string) {
	for _, o := range owners {
		if f.mix.isolate && o != owners[0] {
			continue
		}
		if err := f.kinesis[o].Set(f.mix.kinesis...); err != nil {
			f.t.Fatal(err)
		}
		if err := f.dynamo[o].Set(f.mix.dynamo...); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *mixFleet) clearRules() {
	for _, p := range f.kinesis {
		_ = p.Set()
	}
	for _, p := range f.dynamo {
		_ = p.Set()
	}
}

// injected sums the faults injected per fault kind and service.
func (f *mixFleet) injected() string {
	sum := make(map[string]int64)
	for service, proxies := range map[string]map[string]*faultproxy.Proxy{"kinesis": f.kinesis, "dynamodb": f.dynamo} {
		for _, p := range proxies {
			for in, n := range p.Injected() {
				sum[service+" "+in.Fault.String()] += n
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sum)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, sum[k]))
	}
	return strings.Join(parts, " ")
}

// start launches one worker against its own proxies; its lines are
// collected until it exits, and t.Cleanup kills it (by PID) if it still runs.
func (f *mixFleet) start(owner string) {
	t := f.t
	dir := os.Getenv("FLEETTEST_LOGDIR")
	if dir == "" {
		dir = t.TempDir()
	}
	errPath := filepath.Join(dir, f.mix.name+"-"+owner+".stderr")
	errFile, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.bin,
		"-kinesis-endpoint", f.kinesis[owner].URL(), "-dynamodb-endpoint", f.dynamo[owner].URL(),
		"-stream", f.base.stream, "-table", f.base.table, "-owner", owner, "-app", app,
		"-failover", failover.String(), "-renew", renew.String(),
		"-sync", syncEvery.String(), "-checkpoint", checkpoint.String(),
		"-stats", "1m", "-publish-timeout", publishTimeout.String())
	if os.Getenv("FLEETTEST_VERBOSE") != "" {
		cmd.Args = append(cmd.Args, "-v")
	}
	cmd.Stderr = errFile
	dieWithTest(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker %s: %v", owner, err)
	}
	errFile.Close()
	p := &mixProc{owner: owner, cmd: cmd, stdin: stdin, stderr: errPath, exited: make(chan struct{})}
	f.mu.Lock()
	f.procs[owner] = p
	f.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.line(p, sc.Text())
		}
		werr := cmd.Wait()
		f.mu.Lock()
		p.exitErr = werr
		if !p.stopping {
			f.problems = append(f.problems, fmt.Sprintf("worker %s exited on its own: %v", owner, werr))
		}
		close(p.exited)
		f.notifyLocked()
		f.mu.Unlock()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			f.mu.Lock()
			p.stopping = true
			f.mu.Unlock()
			_ = cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				t.Errorf("worker %s (pid %d) did not exit after SIGKILL", owner, cmd.Process.Pid)
			}
		}
		if t.Failed() || os.Getenv("FLEETTEST_LOGS") != "" {
			t.Logf("--- %s stderr (tail) ---\n%s", owner, tail(p.stderr, 30))
		}
	})
}

func (f *mixFleet) line(p *mixProc, text string) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notifyLocked()
	if strings.HasPrefix(text, "#pub") {
		pub, done, err := ParsePublished(text)
		switch {
		case err != nil:
			f.problems = append(f.problems, fmt.Sprintf("worker %s: %v", p.owner, err))
		case pub == nil:
			f.pubDone[done] = true
		default:
			f.calls = append(f.calls, *pub)
			if pub.Err == "" {
				f.published[record{pub.Key, pub.Index}] = true
			}
		}
		return
	}
	h, s, err := ParseLine(text)
	switch {
	case err != nil:
		f.problems = append(f.problems, fmt.Sprintf("worker %s: %v", p.owner, err))
	case s != nil: // lease-store counts: the fleet test's business
	case h.Owner != p.owner:
		f.problems = append(f.problems, fmt.Sprintf("worker %s printed a line of %s: %q", p.owner, h.Owner, text))
	default:
		r := record{h.Key, h.Index}
		f.seen[r] = append(f.seen[r], sighting{owner: h.Owner, shard: h.Shard, seq: h.Sequence, at: now, pos: p.lines})
		p.lines++
	}
}

func (f *mixFleet) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *mixFleet) command(owner string, c PublishCommand) {
	f.mu.Lock()
	p := f.procs[owner]
	f.mu.Unlock()
	if _, err := io.WriteString(p.stdin, c.String()); err != nil {
		f.t.Fatalf("command to %s: %v", owner, err)
	}
}

func (f *mixFleet) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
		f.t.Fatalf("sleep: %v", ctx.Err())
	}
}

// awaitBalanced polls the lease table until every shard is owned and every
// worker owns one, so the mix starts from a steady fleet.
func (f *mixFleet) awaitBalanced(ctx context.Context) {
	t := f.t
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last []lease.Lease
	for {
		f.mu.Lock()
		problems := slices.Clone(f.problems)
		f.mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("before the faults: %s", strings.Join(problems, "; "))
		}
		var err error
		if last, err = f.base.store.List(ctx, f.base.namespace); err != nil {
			t.Fatalf("list leases: %v", err)
		}
		load := ownerLoad(last)
		if len(last) == shards && sum(load) == shards && len(load) == mixWorkers {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the workers did not share the shards before the deadline; leases: %s", describe(last))
		}
	}
}

// awaitDone waits until every worker has published its keys and every
// published record has been handled, failing at once when a worker dies.
func (f *mixFleet) awaitDone(ctx context.Context) {
	for {
		f.mu.Lock()
		problems := slices.Clone(f.problems)
		done := len(f.pubDone) == mixWorkers && f.unhandledLocked() == 0
		ch := f.changed
		f.mu.Unlock()
		if len(problems) > 0 {
			f.t.Fatalf("mix %s: %s", f.mix.name, strings.Join(problems, "; "))
		}
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			f.mu.Lock()
			defer f.mu.Unlock()
			var waiting []string
			for _, o := range slices.Sorted(maps.Keys(f.procs)) {
				if !f.pubDone[o] {
					waiting = append(waiting, o)
				}
			}
			f.t.Fatalf("mix %s: %v: %d of %d records published (still publishing: %v), %d published not handled; last publish errors: %s",
				f.mix.name, ctx.Err(), len(f.published), mixKeys*mixPerKey, waiting, f.unhandledLocked(), f.lastErrorsLocked(3))
		}
	}
}

func (f *mixFleet) unhandledLocked() int {
	n := 0
	for r := range f.published {
		if len(f.seen[r]) == 0 {
			n++
		}
	}
	return n
}

func (f *mixFleet) lastErrorsLocked(n int) string {
	var errs []string
	for i := len(f.calls) - 1; i >= 0 && len(errs) < n; i-- {
		if c := f.calls[i]; c.Err != "" {
			errs = append(errs, fmt.Sprintf("%s %s/%d after %v: %s", c.Owner, c.Key, c.Index, c.Took.Round(time.Millisecond), c.Err))
		}
	}
	return strings.Join(errs, "; ")
}

// terminate SIGTERMs owner and requires a clean exit within 20 s; the
// workers are stopped one after another.
func (f *mixFleet) terminate(owner string) {
	f.mu.Lock()
	p := f.procs[owner]
	p.stopping = true
	f.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		f.t.Fatalf("SIGTERM %s: %v", owner, err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		// Killed, so that the figures are still checked and reported.
		f.t.Errorf("worker %s still running 20 s after SIGTERM; killing it", owner)
		_ = p.cmd.Process.Kill()
		<-p.exited
		return
	}
	f.mu.Lock()
	err := p.exitErr
	f.mu.Unlock()
	if err != nil {
		f.t.Errorf("worker %s after SIGTERM: %v, want exit status 0", owner, err)
	}
}

type mixResult struct {
	published, handled, lost    int
	storedTwice, redelivered    int
	orderViolations, twoOwners  int
	publishCalls, publishErrors int
	publishMax                  time.Duration
}

// dump writes every handled line with the time the test received it.
func (f *mixFleet) dump(path string) {
	f.mu.Lock()
	var lines []string
	for r, ss := range f.seen {
		for _, s := range ss {
			lines = append(lines, fmt.Sprintf("%s %s %s %d %s %s", s.at.UTC().Format("15:04:05.000000"), s.owner, r.key, r.index, s.shard, s.seq))
		}
	}
	f.mu.Unlock()
	sort.Strings(lines)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		f.t.Logf("dump: %v", err)
	}
}

// check computes the mix's figures and asserts what a user relies on.
func (f *mixFleet) check() mixResult {
	t := f.t
	f.mu.Lock()
	defer f.mu.Unlock()
	var r mixResult
	r.published = len(f.published)
	if r.published != mixKeys*mixPerKey {
		t.Errorf("%d records published, want %d", r.published, mixKeys*mixPerKey)
	}

	// Every publish call returned within its deadline.
	r.publishCalls = len(f.calls)
	for _, c := range f.calls {
		r.publishMax = max(r.publishMax, c.Took)
		if c.Err != "" {
			r.publishErrors++
		}
		if c.Took > publishTimeout+publishSlack {
			t.Errorf("publish of %s/%d by %s returned after %v, want within %v", c.Key, c.Index, c.Owner, c.Took, publishTimeout+publishSlack)
		}
	}

	// Lost: published and never handled.
	var lost []string
	for rec := range f.published {
		if len(f.seen[rec]) == 0 {
			lost = append(lost, fmt.Sprintf("%s/%d", rec.key, rec.index))
		}
	}
	r.lost = len(lost)
	if r.lost > 0 {
		sort.Strings(lost)
		t.Errorf("%d published records never handled: %s", r.lost, strings.Join(lost[:min(10, len(lost))], ", "))
	}

	// Duplicates: a stream record handled again (redelivered), or one
	// index stored under two sequence numbers (published twice).
	for rec, ss := range f.seen {
		r.handled += len(ss)
		seqs := make(map[string]int)
		for _, s := range ss {
			seqs[s.shard+"/"+s.seq]++
		}
		r.storedTwice += len(seqs) - 1
		for _, n := range seqs {
			r.redelivered += n - 1
		}
		if !f.published[rec] {
			t.Errorf("record %s/%d handled but never published", rec.key, rec.index)
		}
	}
	if r.storedTwice > 0 && !f.mix.storedTwice && r.publishErrors == 0 {
		t.Errorf("%d records stored twice, yet no publish failed and no answer was lost", r.storedTwice)
	}
	if r.redelivered > 0 && !f.mix.redelivered {
		t.Errorf("%d records delivered again, yet the mix loses no lease and no iterator", r.redelivered)
	}

	// Order: an owner handles a key's records in index order. Going back
	// to records it (or another owner) already handled is a redelivery; a
	// record handled for the first time after a later one is a violation.
	type event struct {
		pos   int
		at    time.Time
		index int
		owner string
	}
	byKey := make(map[string][]event)
	for rec, ss := range f.seen {
		for _, s := range ss {
			byKey[rec.key] = append(byKey[rec.key], event{s.pos, s.at, rec.index, s.owner})
		}
	}
	for key, evs := range byKey {
		// The order the test received the lines in, which is each
		// worker's print order.
		sort.Slice(evs, func(i, j int) bool {
			if !evs[i].at.Equal(evs[j].at) {
				return evs[i].at.Before(evs[j].at)
			}
			return evs[i].pos < evs[j].pos
		})
		handled := make(map[int]bool)
		highest := make(map[string]int)
		for _, e := range evs {
			if h, ok := highest[e.owner]; ok && e.index < h && !handled[e.index] {
				r.orderViolations++
				if r.orderViolations <= 5 {
					t.Errorf("worker %s handled %s/%d for the first time after %s/%d", e.owner, key, e.index, key, h)
				}
			}
			handled[e.index] = true
			highest[e.owner] = max(highest[e.owner], e.index)
		}
	}

	// Two owners at once: on one shard, an owner handles a record less
	// than concurrentWindow after its previous one there although another
	// owner handled one of the shard's records in between. Two readers of
	// one shard interleave at every poll; for a lease to go from A to B and
	// back, it must expire (the failover time) or be handed over twice.
	type shardEvent struct {
		at    time.Time
		pos   int
		owner string
	}
	byShard := make(map[string][]shardEvent)
	for _, ss := range f.seen {
		for _, s := range ss {
			byShard[s.shard] = append(byShard[s.shard], shardEvent{s.at, s.pos, s.owner})
		}
	}
	for shard, evs := range byShard {
		sort.Slice(evs, func(i, j int) bool {
			if !evs[i].at.Equal(evs[j].at) {
				return evs[i].at.Before(evs[j].at)
			}
			return evs[i].pos < evs[j].pos
		})
		last := make(map[string]time.Time) // per owner, its latest event on the shard
		var prev string
		for _, e := range evs {
			if at, ok := last[e.owner]; ok && e.owner != prev && e.at.Sub(at) < concurrentWindow {
				r.twoOwners++
				if r.twoOwners <= 3 {
					t.Errorf("%s handled records of %s %v after its previous one, %s having handled one in between: two owners at once",
						e.owner, shard, e.at.Sub(at).Round(time.Millisecond), prev)
				}
			}
			last[e.owner], prev = e.at, e.owner
		}
	}
	return r
}

// concurrentWindow is longer than a reader's poll at the tip (1 s, the
// default) and shorter than a lease going away and back at the test's
// timing (an expiry waits the failover time, 3 s; two handoffs take two
// lease passes and a reader's stop).
const concurrentWindow = 1500 * time.Millisecond
