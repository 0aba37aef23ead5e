package sim

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// TestCheckReportsOverlapsAndDuplicates: the checker names a record handled
// by a second instance while the first still handled the shard, and a
// record handled twice with no crash, partition or lost lease to explain
// it; the same handlings one after the other on one owner are no
// violation.
func TestCheckReportsOverlapsAndDuplicates(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	rep := &Report{Began: t0, Phases: []Phase{{Name: "join", At: t0, Converged: true}}}
	f := &fleet{handled: map[recID][]handling{
		{"shardId-000000000000", "1"}: {
			{owner: "a", start: t0.Add(time.Second), end: t0.Add(5 * time.Second)},
			{owner: "b", start: t0.Add(2 * time.Second), end: t0.Add(3 * time.Second)},
		},
		{"shardId-000000000001", "7"}: {
			{owner: "c", start: t0.Add(time.Second), end: t0.Add(2 * time.Second)},
		},
	}}
	f.check(rep)
	all := strings.Join(rep.Violations, "\n")
	for _, want := range []string{"1 handlings overlapped another instance's on the same shard", "no crash or partition explains it"} {
		if !strings.Contains(all, want) {
			t.Errorf("violations do not say %q:\n%s", want, all)
		}
	}

	calm := &Report{Began: t0, Phases: []Phase{{Name: "join", At: t0, Converged: true}}}
	f = &fleet{handled: map[recID][]handling{
		{"shardId-000000000000", "1"}: {{owner: "a", start: t0.Add(time.Second), end: t0.Add(2 * time.Second)}},
		{"shardId-000000000000", "2"}: {{owner: "b", start: t0.Add(3 * time.Second), end: t0.Add(4 * time.Second)}},
	}}
	f.check(calm)
	if len(calm.Violations) != 0 {
		t.Errorf("handlings one after another: %v", calm.Violations)
	}
}

// TestMemberBillingMatchesDynalite checks the simulation's billing of the
// member calls (store.go) against the units dynalite reports for the same
// calls, which it computes by DynamoDB's documented rules: a write a unit
// per 1 KB of the item, a strongly consistent GetItem a unit per 4 KB of
// the item, a Query a unit per 4 KB of the items it returns, summed
// before rounding, once per call.
func TestMemberBillingMatchesDynalite(t *testing.T) {
	url := livetest.DynamoDBEndpoint(t)
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	api := &Metered{DynamoDBAPI: client}
	table := fmt.Sprintf("sim-billing-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const ns, n = "sim/stream", 150
	for _, layout := range []lease.MembersLayout{lease.MembersTable, lease.MembersItem} {
		t.Run(layout.String(), func(t *testing.T) {
			d := lease.NewDynamoDB(api, table, lease.CreateTableIfMissing(), lease.WithMembers(layout))
			if err := d.EnsureTable(ctx); err != nil {
				t.Fatal(err)
			}
			var c counters
			c.layout = layout
			var fault atomic.Int32
			s := newStore(&store{inner: d, c: &c, fault: &fault}).(lease.MemberStore)
			space := ns + "/" + layout.String()
			for i := range n {
				if err := s.Heartbeat(ctx, space, lease.Member{Owner: fmt.Sprintf("i%03d", i), Beat: 12345, Held: 7}); err != nil {
					t.Fatal(err)
				}
			}
			w0 := c.snapshot().WCU
			_, dw0 := api.Consumed()
			if err := s.Heartbeat(ctx, space, lease.Member{Owner: "i000", Beat: 12346, Held: 7}); err != nil {
				t.Fatal(err)
			}
			est := c.snapshot().WCU - w0
			_, dw1 := api.Consumed()
			lastWCU := dw1 - dw0
			r0, _ := api.Consumed()
			e0 := c.snapshot().RCU
			if _, err := s.Members(ctx, space); err != nil {
				t.Fatal(err)
			}
			r1, _ := api.Consumed()
			if got, want := c.snapshot().RCU-e0, r1-r0; got != want {
				t.Errorf("a read of %d members: estimated %v RCU, dynalite %v", n, got, want)
			}
			if est != lastWCU {
				t.Errorf("a heartbeat among %d members: estimated %v WCU, dynalite %v (the last one)", n, est, lastWCU)
			}
			t.Logf("%s: a heartbeat among %d members %v WCU, a read of them %v RCU", layout, n, est, r1-r0)
		})
	}
}

// TestRosterBillingMatchesDynalite checks the billing of the roster's
// calls (rosterStore) against dynalite's units for the same calls: the
// version's GetItem and UpdateItem, a BatchGetItem of two members' items
// (a unit per item), a death declared (a conditional UpdateItem), a
// notice posted, read and withdrawn (conditional UpdateItems of the
// version item: dynalite bills a refused one nothing, DynamoDB a write
// unit, as the estimate does), and a roster heartbeat (a conditional
// PutItem), among 150 members.
func TestRosterBillingMatchesDynalite(t *testing.T) {
	url := livetest.DynamoDBEndpoint(t)
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	api := &Metered{DynamoDBAPI: client}
	table := fmt.Sprintf("sim-roster-billing-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const ns, n = "sim/stream", 150
	d := lease.NewDynamoDB(api, table, lease.CreateTableIfMissing(), lease.WithMembers(lease.MembersTable))
	if err := d.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	var c counters
	c.layout = lease.MembersTable
	var fault atomic.Int32
	s, ok := newStore(&store{inner: d, c: &c, fault: &fault}).(*noticeStore)
	if !ok {
		t.Fatal("no roster store over the members table")
	}
	for i := range n {
		if err := s.Heartbeat(ctx, ns, lease.Member{Owner: fmt.Sprintf("i%03d", i), Beat: 12345, Held: 7, Roster: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"bump", func() error { _, err := s.BumpRoster(ctx, ns); return err }},
		{"version", func() error { _, err := s.RosterVersion(ctx, ns); return err }},
		{"members by owner", func() error { _, _, err := s.MembersByOwner(ctx, ns, []string{"i007", "i008"}); return err }},
		{"declare", func() error { return s.DeclareDead(ctx, ns, "i009", 12345) }},
		{"post a notice", func() error {
			return s.PostNotice(ctx, ns, lease.RosterNotice{Owner: "i011", By: "i010", Beat: 12345, Due: 2600 * time.Millisecond})
		}},
		{"watch with a notice", func() error {
			_, _, got, err := s.WatchRoster(ctx, ns, []string{"i011", "i012"})
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("notices %v, want i011's", got)
			}
			return err
		}},
		{"withdraw it", func() error {
			return s.WithdrawNotice(ctx, ns, lease.RosterNotice{Owner: "i011", By: "i010", Beat: 12345})
		}},
		{"heartbeat", func() error {
			return s.Heartbeat(ctx, ns, lease.Member{Owner: "i010", Beat: 12346, Held: 7, Roster: true})
		}},
	} {
		e0 := c.snapshot()
		r0, w0 := api.Consumed()
		if err := call.do(); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		e1 := c.snapshot()
		r1, w1 := api.Consumed()
		if got, want := e1.RCU-e0.RCU, r1-r0; got != want {
			t.Errorf("%s: estimated %v RCU, dynalite %v", call.name, got, want)
		}
		if got, want := e1.WCU-e0.WCU, w1-w0; got != want {
			t.Errorf("%s: estimated %v WCU, dynalite %v", call.name, got, want)
		}
		t.Logf("%s: %v RCU, %v WCU", call.name, r1-r0, w1-w0)
	}
}
