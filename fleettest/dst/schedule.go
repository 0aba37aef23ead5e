package dst

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what an event does.
type Kind int

// The events of a schedule.
const (
	// Join starts a new instance of application App.
	Join Kind = iota
	// Leave shuts instance Inst down gracefully (Broker.Shutdown).
	Leave
	// Crash abandons instance Inst: its calls fail from now on, its
	// handlers stop, it releases nothing.
	Crash
	// Pause freezes instance Inst for D: every lease-store and Kinesis call
	// and every handler of it waits at a gate until the pause ends (its
	// timers still fire: see the package doc).
	Pause
	// PauseAfterMembers freezes instance Inst for D just after the store
	// has answered its next members read: the answer reaches the
	// coordinator D late.
	PauseAfterMembers
	// StoreSlow makes Inst's heartbeats, members reads, lists, gets, takes
	// and creates take Lat each, for D.
	StoreSlow
	// StoreLate makes Inst's lease-store writes land but be answered with
	// the call's deadline error (after the deadline where the caller holds
	// no lock while it waits), for D.
	StoreLate
	// StoreFail makes Inst's lease-store calls fail at once (throttled
	// when Throttle), for D.
	StoreFail
	// KinesisFail makes Inst's GetRecords, GetShardIterator and
	// SubscribeToShard calls fail (throttled when Throttle), for D, and
	// breaks its fan-out subscriptions at their next event.
	KinesisFail
	// Split splits a random open shard; Merge merges two adjacent open
	// shards.
	Split
	Merge
	// Recreate deletes the stream and creates it again with N shards (its
	// shard ids come back with other hash ranges).
	Recreate
	// Scale runs UpdateShardCount (UNIFORM_SCALING) to N open shards,
	// clamped to what the service allows (half to twice the open shards),
	// as the in-process server does it: every open shard merged into one,
	// which is split evenly, so readers go through a chain of parents.
	Scale
	// KinesisSlow makes Inst's Kinesis calls (GetRecords,
	// GetShardIterator, ListShards, DescribeStreamSummary) answer Lat
	// late, under the runtime's Kinesis call deadline, for D.
	KinesisSlow
	// KinesisHang makes those calls, sent during D, never answered: each
	// waits until its caller's deadline ends it.
	KinesisHang
	// PutSlow makes the publishers' PutRecords answer Lat late (under
	// their call deadline), for D; PutLate stores the records of a
	// PutRecords sent during D but never answers it (its caller's
	// deadline ends it); PutHang neither stores nor answers; PutFail fails
	// it at once (throttled when Throttle).
	PutSlow
	PutLate
	PutHang
	PutFail
	// StoreHang makes Inst's lease-store calls, sent during D, never
	// answered and not applied (the request lost): each waits for its
	// caller's deadline.
	StoreHang
	// SubCut drops the connection of the fan-out subscriptions of one
	// shard (the N-th, counting from 1 and round, of those subscribed at
	// the time, in shard order; every shard's when N is 0) in the middle
	// of an event; SubEnd ends them cleanly, as the service does at a
	// subscription's lifetime. The reader must subscribe again after its
	// last continuation. Drawn by Mix.FanOut only, and added after the
	// other kinds, so that an encoded schedule keeps its meaning.
	SubCut
	SubEnd
	kindCount
)

var kindNames = [kindCount]string{"join", "leave", "crash", "pause", "pause-after-members", "store-slow", "store-late", "store-fail",
	"kinesis-fail", "split", "merge", "recreate", "scale", "kinesis-slow", "kinesis-hang",
	"put-slow", "put-late", "put-hang", "put-fail", "store-hang", "sub-cut", "sub-end"}

func (k Kind) String() string {
	if k < 0 || k >= kindCount {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Event is one step of a schedule, at virtual time At from the run's start.
type Event struct {
	At       time.Duration
	Kind     Kind
	App      string // Join
	Inst     string // the instance it is about
	D        time.Duration
	Lat      time.Duration // StoreSlow, KinesisSlow, PutSlow
	Throttle bool          // StoreFail, KinesisFail, PutFail
	N        int           // Recreate, Scale: shards; SubCut, SubEnd: which (0 all)
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.3fs %s", e.At.Seconds(), e.Kind)
	if e.Inst != "" {
		fmt.Fprintf(&b, " %s", e.Inst)
	}
	if e.Kind == Join {
		fmt.Fprintf(&b, " (app %s)", e.App)
	}
	if e.D > 0 {
		fmt.Fprintf(&b, " for %v", e.D)
	}
	if e.Lat > 0 {
		fmt.Fprintf(&b, " latency %v", e.Lat)
	}
	if e.Throttle {
		b.WriteString(" throttled")
	}
	switch {
	case e.Kind == SubCut || e.Kind == SubEnd:
		if e.N == 0 {
			b.WriteString(" of every shard")
		} else {
			fmt.Fprintf(&b, " of subscription #%d", e.N)
		}
	case e.N > 0:
		fmt.Fprintf(&b, " to %d shards", e.N)
	}
	return b.String()
}

// Mix is which faults and workloads a schedule draws from. The zero Mix is
// joins, leaves and plain keyed publishes on one application.
type Mix struct {
	Name string
	// Apps is how many applications read the stream (1 or 2).
	Apps int
	// Crash, Pause, PauseAfterMembers, StoreSlow, StoreLate, StoreFail,
	// KinesisFail, Reshard, Recreate, Scale, KinesisSlow and KinesisHang
	// enable those events; PutFaults the publishers' PutSlow, PutLate,
	// PutHang and PutFail; StoreHang that event.
	Crash, Pause, PauseAfterMembers, StoreSlow, StoreLate, StoreFail bool
	KinesisFail, KinesisSlow, KinesisHang, Reshard, Recreate, Scale  bool
	PutFaults, StoreHang                                             bool
	// SlowStoreMax bounds StoreSlow's latency (default 0.9 × the lease
	// call deadline: slow, but answered).
	SlowStoreMax time.Duration
	// Slow is the share of first deliveries whose handler takes 1–8 s;
	// Retry, Reject and Panic the shares answered so (first attempts);
	// Stuck the share whose handler hangs 15–45 s, deaf to its context
	// (past the shutdown timeout, handoffs and the failover time), at
	// most maxStuck a run.
	Slow, Retry, Reject, Panic, Stuck float64
	// HeartbeatsUnderMu treats heartbeats as calls made under a mutex:
	// never delayed (see opClass); "slowreads" is "slowstore" without
	// slow heartbeats. (The liveness fix of issue 29 first held a
	// sync.Mutex across the heartbeat, which stopped the bubble's clock;
	// heartbeats now wait on a channel, beatSem, and may be slow.)
	HeartbeatsUnderMu bool
	// FanOut subscribes by enhanced fan-out (runtime.FanOut, a stream
	// consumer per application, subscriptions living 10–20 s) instead of
	// polling, and draws SubCut and SubEnd.
	FanOut bool
	// NoChurn: no instance joins or leaves after the start (to tell a
	// fault's violations from a handoff's).
	NoChurn bool
	// Aggregate is the share of publishes through an aggregating
	// publisher; Keyless the share published without a key.
	Aggregate, Keyless float64
	// Batch is the share of a keyed publisher's publishes that are a
	// SendAll of 2–4 messages of its key.
	Batch float64
}

// Mixes are the named scenario mixes.
var Mixes = map[string]Mix{
	// What make test runs: no fault that today's defects turn into a
	// violation (see dst_test.go).
	"basic": {Name: "basic", Apps: 1, Crash: true, StoreFail: true, KinesisFail: true, Reshard: true,
		Reject: 0.02, Panic: 0.01, Keyless: 0.1},
	"twoapps":   {Name: "twoapps", Apps: 2, Crash: true, Reject: 0.02, Keyless: 0.1, Aggregate: 0.3},
	"aggregate": {Name: "aggregate", Apps: 1, Crash: true, Reshard: true, Aggregate: 0.6, Keyless: 0.1},
	// Batches (SendAll) beside lone publishes, plain and aggregated, across
	// reshards, crashes and PutRecords faults.
	"batches": {Name: "batches", Apps: 1, Crash: true, Reshard: true, PutFaults: true, Aggregate: 0.5, Batch: 0.4, Keyless: 0.1},
	// Joins, leaves and crashes only, with the strict unread bound.
	"churn": {Name: "churn", Apps: 1, Crash: true},
	// Defect hunters.
	"slowjoin":  {Name: "slowjoin", Apps: 1, Slow: 0.15},
	"late":      {Name: "late", Apps: 1, NoChurn: true, StoreLate: true},
	"slowstore": {Name: "slowstore", Apps: 1, NoChurn: true, StoreSlow: true},
	"slowreads": {Name: "slowreads", Apps: 1, NoChurn: true, StoreSlow: true, HeartbeatsUnderMu: true},
	"pause":     {Name: "pause", Apps: 1, NoChurn: true, Pause: true, Slow: 0.1},
	"pausemem":  {Name: "pausemem", Apps: 1, NoChurn: true, PauseAfterMembers: true},
	"retry":     {Name: "retry", Apps: 2, Retry: 0.1},
	"recreate":  {Name: "recreate", Apps: 1, Recreate: true, Aggregate: 1},
	// UpdateShardCount under churn and crashes, both publishers, keyless
	// records too.
	"scale": {Name: "scale", Apps: 1, Crash: true, Scale: true, Aggregate: 0.3, Keyless: 0.1},
	// Kinesis calls slow (under the call deadline) and never answered,
	// under churn, crashes and reshards.
	"kinslow": {Name: "kinslow", Apps: 1, Crash: true, KinesisSlow: true, KinesisHang: true, Reshard: true, Aggregate: 0.2, Keyless: 0.1},
	// PutRecords slow, answered late after storing, never answered and
	// failed, with two applications reading the copies and aggregates.
	"putfaults": {Name: "putfaults", Apps: 2, Crash: true, PutFaults: true, Reshard: true, Aggregate: 0.4, Keyless: 0.1},
	// Lease-store calls never answered nor applied, under churn, crashes
	// and reshards.
	"storehang": {Name: "storehang", Apps: 1, Crash: true, StoreHang: true, Reshard: true, Keyless: 0.1},
	// Handlers that hang past every bound of the runtime, deaf to their
	// context, across handoffs, leaves and crashes.
	"stuck": {Name: "stuck", Apps: 1, Crash: true, Reshard: true, Stuck: 0.005, Slow: 0.03, Aggregate: 0.2, Keyless: 0.1},
	// Enhanced fan-out: subscriptions cut, ended and renewed across
	// handoffs, crashes, pauses and reshards.
	"fanout": {Name: "fanout", Apps: 1, FanOut: true, Crash: true, Pause: true, KinesisFail: true, Reshard: true,
		Slow: 0.05, Reject: 0.02, Panic: 0.01, Aggregate: 0.3, Keyless: 0.1},
	// Everything at once.
	"all": {Name: "all", Apps: 2, Crash: true, Pause: true, PauseAfterMembers: true, StoreSlow: true, StoreLate: true, StoreFail: true,
		KinesisFail: true, Reshard: true, Slow: 0.05, Retry: 0.03, Reject: 0.02, Panic: 0.01, Aggregate: 0.3, Keyless: 0.1},
}

// Generate draws a schedule from seed: instances joining at the start and
// later, leaving and crashing, and the mix's faults, over length.
func Generate(seed uint64, mix Mix, t Timing) []Event {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	apps := appNames(mix.Apps)
	var evs []Event
	n := map[string]int{}
	var live []string // instances that may be the subject of an event
	join := func(at time.Duration, app string) {
		name := fmt.Sprintf("%s%d", app, n[app])
		n[app]++
		evs = append(evs, Event{At: at, Kind: Join, App: app, Inst: name})
		live = append(live, name)
	}
	for _, app := range apps {
		n := 1 + rng.IntN(3)
		if mix.NoChurn {
			n = 2 + rng.IntN(2) // a fault needs another instance to show
		}
		for range n {
			join(0, app)
		}
	}
	var kinds []Kind
	add := func(on bool, k Kind, weight int) {
		for range weight {
			if on {
				kinds = append(kinds, k)
			}
		}
	}
	add(!mix.NoChurn, Join, 3)
	add(!mix.NoChurn, Leave, 2)
	add(mix.Crash, Crash, 2)
	add(mix.Pause, Pause, 3)
	add(mix.PauseAfterMembers, PauseAfterMembers, 3)
	add(mix.StoreSlow, StoreSlow, 3)
	add(mix.StoreLate, StoreLate, 3)
	add(mix.StoreFail, StoreFail, 2)
	add(mix.KinesisFail, KinesisFail, 2)
	add(mix.Reshard, Split, 1)
	add(mix.Reshard, Merge, 1)
	add(mix.Recreate, Recreate, 2)
	add(mix.Scale, Scale, 2)
	add(mix.KinesisSlow, KinesisSlow, 3)
	add(mix.KinesisHang, KinesisHang, 2)
	add(mix.PutFaults, PutSlow, 1)
	add(mix.PutFaults, PutLate, 1)
	add(mix.PutFaults, PutHang, 1)
	add(mix.PutFaults, PutFail, 1)
	add(mix.StoreHang, StoreHang, 3)
	// Last, so that every other mix draws as it did before fan-out.
	add(mix.FanOut, SubCut, 2)
	add(mix.FanOut, SubEnd, 1)
	slowMax := mix.SlowStoreMax
	if slowMax == 0 {
		slowMax = t.Failover / 3 * 9 / 10
	}
	at := time.Duration(0)
	recreated := false
	for {
		at += time.Duration(500+rng.IntN(4500)) * time.Millisecond
		if at >= t.Length {
			break
		}
		if len(kinds) == 0 {
			break
		}
		k := kinds[rng.IntN(len(kinds))]
		pick := func() string { return live[rng.IntN(len(live))] }
		switch k {
		case Join:
			if len(live) >= 6 {
				continue
			}
			join(at, apps[rng.IntN(len(apps))])
		case Leave, Crash:
			i := rng.IntN(len(live))
			app := live[i][:1]
			if len(slices.DeleteFunc(slices.Clone(live), func(s string) bool { return s[:1] != app })) <= 1 {
				continue // keep an instance of each application
			}
			evs = append(evs, Event{At: at, Kind: k, Inst: live[i]})
			live = slices.Delete(live, i, i+1)
		case Pause, PauseAfterMembers:
			d := time.Duration(float64(t.Failover) * (0.5 + 3*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: d.Round(time.Millisecond)})
		case StoreSlow:
			lat := time.Duration(float64(slowMax) * (0.5 + 0.5*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: time.Duration(5+rng.IntN(20)) * time.Second, Lat: lat.Round(time.Millisecond)})
		case StoreLate:
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: time.Duration(3+rng.IntN(15)) * time.Second})
		case StoreFail, KinesisFail:
			d := time.Duration(float64(t.Failover) * (0.2 + 0.6*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: d.Round(time.Millisecond), Throttle: rng.IntN(2) == 0})
		case KinesisSlow:
			lat := time.Duration(float64(t.Failover) * (0.2 + 0.7*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: time.Duration(5+rng.IntN(20)) * time.Second, Lat: lat.Round(time.Millisecond)})
		case KinesisHang:
			d := time.Duration(float64(t.Failover) * (0.3 + 1.7*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: d.Round(time.Millisecond)})
		case StoreHang:
			d := time.Duration(float64(t.Failover) * (0.2 + 0.8*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, Inst: pick(), D: d.Round(time.Millisecond)})
		case PutSlow:
			lat := time.Duration(float64(putCallTimeout) * (0.1 + 0.8*rng.Float64()))
			evs = append(evs, Event{At: at, Kind: k, D: time.Duration(2+rng.IntN(8)) * time.Second, Lat: lat.Round(time.Millisecond)})
		case PutLate, PutHang, PutFail:
			d := time.Duration(500+rng.IntN(3500)) * time.Millisecond
			evs = append(evs, Event{At: at, Kind: k, D: d, Throttle: k == PutFail && rng.IntN(2) == 0})
		case Split, Merge:
			evs = append(evs, Event{At: at, Kind: k})
		case Scale:
			evs = append(evs, Event{At: at, Kind: k, N: 1 + rng.IntN(8)})
		case SubCut, SubEnd:
			n := 0
			if rng.IntN(4) > 0 {
				n = 1 + rng.IntN(12)
			}
			evs = append(evs, Event{At: at, Kind: k, N: n})
		case Recreate:
			if recreated {
				continue
			}
			recreated = true
			evs = append(evs, Event{At: at, Kind: k, N: 2 + rng.IntN(5)})
		}
	}
	return evs
}

func appNames(n int) []string {
	if n <= 1 {
		return []string{"a"}
	}
	return []string{"a", "b"}[:min(n, 2)]
}

// Timing is the runtime's timing in a run, and the run's length.
type Timing struct {
	Failover, Renew, Sync, Checkpoint time.Duration
	// IteratorTTL is how long a shard iterator stays valid (the
	// service's is 5 min): short, so that a long pause expires its
	// instance's iterators.
	IteratorTTL time.Duration
	// Length is how long events happen and messages are published; the
	// drain after it lasts at most Drain. A message not handled by then is
	// lost: Drain must outlast the slowest backlog a mix can build without
	// a defect, since a key's records are handled one at a time.
	Length, Drain time.Duration
}

// DefaultTiming is a 3 s failover, 1 s renewal and shard sync, 8 s
// iterators, 40 s of events and a drain of up to 2 min. (A drain of 60 s
// was too short for slowjoin's handlers, 15 % of first deliveries taking
// 1–8 s: one instance that leaves after 38 s under them, with 10 s of
// shutdown wait, leaves a key backlog its successor handles in 60–90 s;
// soak seed 1796537878458872688 reported 14 such messages lost. A drain
// ends as soon as every message is handled, so a passing run is not
// longer for it.)
var DefaultTiming = Timing{Failover: 3 * time.Second, Renew: time.Second, Sync: time.Second, Checkpoint: 500 * time.Millisecond,
	IteratorTTL: 8 * time.Second, Length: 40 * time.Second, Drain: 2 * time.Minute}

// EncodeEvents writes a schedule as one line (for -dst.events): each event
// as at,kind,app,inst,d,lat,throttle,n with durations in milliseconds,
// events separated by ';'.
func EncodeEvents(evs []Event) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		t := 0
		if e.Throttle {
			t = 1
		}
		parts[i] = fmt.Sprintf("%d,%s,%s,%s,%d,%d,%d,%d", e.At.Milliseconds(), e.Kind, e.App, e.Inst, e.D.Milliseconds(), e.Lat.Milliseconds(), t, e.N)
	}
	return strings.Join(parts, ";")
}

// DecodeEvents reads what EncodeEvents wrote.
func DecodeEvents(s string) ([]Event, error) {
	var out []Event
	for _, p := range strings.Split(s, ";") {
		if p == "" {
			continue
		}
		f := strings.Split(p, ",")
		if len(f) != 8 {
			return nil, fmt.Errorf("dst: event %q: want 8 fields", p)
		}
		var at, d, lat int64
		var th, n int
		if _, err := fmt.Sscanf(f[0]+" "+f[4]+" "+f[5]+" "+f[6]+" "+f[7], "%d %d %d %d %d", &at, &d, &lat, &th, &n); err != nil {
			return nil, fmt.Errorf("dst: event %q: %v", p, err)
		}
		k := slices.Index(kindNames[:], f[1])
		if k < 0 {
			return nil, fmt.Errorf("dst: event %q: unknown kind %q", p, f[1])
		}
		out = append(out, Event{At: time.Duration(at) * time.Millisecond, Kind: Kind(k), App: f[2], Inst: f[3],
			D: time.Duration(d) * time.Millisecond, Lat: time.Duration(lat) * time.Millisecond, Throttle: th == 1, N: n})
	}
	return out, nil
}
