package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// pageStatus is status.json as the page (status/status.js) reads it: the
// names here are the ones the script uses.
type pageStatus struct {
	Owner  string    `json:"owner"`
	Time   time.Time `json:"time"`
	Leases struct {
		Held       int `json:"held"`
		Taken      int `json:"taken"`
		Lost       int `json:"lost"`
		HandedOver int `json:"handed_over"`
	} `json:"leases"`
	Subscriptions []pageSubscription `json:"subscriptions"`
}

type pageSubscription struct {
	Stream     string      `json:"stream"`
	Handler    string      `json:"handler"`
	State      string      `json:"state"`
	Workers    int         `json:"workers"`
	ByKey      bool        `json:"by_key"`
	QueueDepth int         `json:"queue_depth"`
	InFlight   int         `json:"in_flight"`
	Handled    int         `json:"handled"`
	PerSecond  float64     `json:"per_second"`
	Outcomes   pageOutcome `json:"outcomes"`
	Shards     []pageShard `json:"shards"`
	Others     []pageShard `json:"others"`
}

type pageOutcome struct {
	Acked        int `json:"acked"`
	Retried      int `json:"retried"`
	Rejected     int `json:"rejected"`
	DeadLettered int `json:"dead_lettered"`
}

type pageShard struct {
	Shard       string      `json:"shard"`
	Owner       string      `json:"owner"`
	Lease       string      `json:"lease"`
	HandoffTo   string      `json:"handoff_to"`
	Checkpoint  string      `json:"checkpoint"`
	SubSequence int64       `json:"sub_sequence"`
	Behind      *int64      `json:"millis_behind_latest"`
	BehindAt    string      `json:"behind_at"`
	Handled     int         `json:"handled"`
	PerSecond   float64     `json:"per_second"`
	Outcomes    pageOutcome `json:"outcomes"`
	InFlight    *int        `json:"in_flight"`
}

func (s pageStatus) sub(stream string) (pageSubscription, bool) {
	for _, sub := range s.Subscriptions {
		if sub.Stream == stream {
			return sub, true
		}
	}
	return pageSubscription{}, false
}

// lockedBuffer is a bytes.Buffer that run writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWithStatus runs the service with -status on a free loopback port and
// returns the page's URL and a stop that waits for run to return 0.
func startWithStatus(t *testing.T, args ...string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, append([]string{"-status", "127.0.0.1:0"}, args...), &stdout, &stderr) }()
	stop = func() {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("run = %d after Ctrl-C\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("run did not return within 20 s of its context ending")
		}
	}
	re := regexp.MustCompile(`status page: (http://127\.0\.0\.1:[0-9]+/)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], stop
		}
		select {
		case c := <-code:
			t.Fatalf("run = %d before serving\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("no status page address printed:\n%s", stdout.String())
		}
	}
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// The JSON behind the status page says what the page shows: every
// subscription running, the order stream's two shards held by this
// instance with a checkpoint and a lag, the orders handled and the
// malformed one dead-lettered, and the handled count rising while the
// service takes more orders.
func TestStatusPageData(t *testing.T) {
	url, stop := startWithStatus(t, "-customers", "3", "-orders", "4", "-pace", "20ms")
	defer stop()

	poll := func(what string, cond func(pageStatus) bool) pageStatus {
		t.Helper()
		var st pageStatus
		for deadline := time.Now().Add(20 * time.Second); ; {
			res, body := get(t, url+"status.json")
			if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("status.json: %s, %s", res.Status, res.Header.Get("Content-Type"))
			}
			st = pageStatus{}
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("status.json: %v\n%s", err, body)
			}
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s; last status.json:\n%s", what, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	st := poll("the first 12 orders and the malformed one handled", func(st pageStatus) bool {
		sub, ok := st.sub("customer-orders")
		return ok && sub.Handled >= 13 && sub.Outcomes.DeadLettered == 1 && len(sub.Shards) == 2 &&
			sub.Shards[0].Checkpoint != "" && sub.Shards[1].Checkpoint != ""
	})
	if st.Owner == "" || st.Leases.Held != 7 || st.Leases.Lost != 0 {
		t.Errorf("instance %q, leases %+v; want an owner holding the 7 shards of the 5 streams", st.Owner, st.Leases)
	}
	streams := []string{}
	for _, sub := range st.Subscriptions {
		streams = append(streams, sub.Stream)
		if sub.State != "running" || sub.Handler == "" {
			t.Errorf("subscription %s: state %q, handler %q", sub.Stream, sub.State, sub.Handler)
		}
	}
	if want := "customer-orders customer-orders.dead-letters customer-orders.journal receipts shipments"; strings.Join(streams, " ") != want {
		t.Errorf("subscriptions %v, want %s", streams, want)
	}
	sub, _ := st.sub("customer-orders")
	if sub.Handler != "main.Service.Post" || sub.Workers != 4 || !sub.ByKey || len(sub.Others) != 0 {
		t.Errorf("customer-orders: %+v", sub)
	}
	total := 0
	for _, sh := range sub.Shards {
		if sh.Owner != st.Owner || sh.Lease != "reading" || sh.Behind == nil || sh.BehindAt == "" || sh.InFlight == nil {
			t.Errorf("shard %+v: want this instance reading, with a lag", sh)
		}
		if !regexp.MustCompile(`^[0-9]+$`).MatchString(sh.Checkpoint) {
			t.Errorf("shard %s: checkpoint %q, want a sequence number", sh.Shard, sh.Checkpoint)
		}
		total += sh.Handled
	}
	if total != sub.Handled {
		t.Errorf("the shards handled %d, the subscription %d", total, sub.Handled)
	}
	if dl, _ := st.sub("customer-orders.dead-letters"); dl.Handled != 1 || dl.Outcomes.Acked != 1 {
		t.Errorf("dead-letter reader: handled %d (%+v), want the 1 dead letter", dl.Handled, dl.Outcomes)
	}

	// More orders come in: the count rises.
	shipped, _ := st.sub("shipments")
	poll("shipments handled rising", func(st pageStatus) bool {
		sub, _ := st.sub("shipments")
		return sub.Handled >= shipped.Handled+5 && sub.PerSecond > 0
	})

	// The page and its script are served; nothing comes from elsewhere.
	res, page := get(t, url)
	if res.StatusCode != http.StatusOK || !bytes.Contains(page, []byte(`<script src="status.js"`)) || regexp.MustCompile(`(src|href)="[a-z]*:?//`).Match(page) {
		t.Errorf("page: %s\n%s", res.Status, page)
	}
	if csp := res.Header.Get("Content-Security-Policy"); csp != "default-src 'self'" {
		t.Errorf("page served with Content-Security-Policy %q", csp)
	}
	if res, js := get(t, url+"status.js"); res.StatusCode != http.StatusOK || !bytes.Contains(js, []byte(`fetch("status.json"`)) {
		t.Errorf("status.js: %s", res.Status)
	}
	// A request for another host name (a DNS name rebound to 127.0.0.1) is refused.
	req, _ := http.NewRequest("GET", url+"status.json", nil)
	req.Host = "attacker.example"
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("status.json for Host attacker.example: %v %v, want 403", res.Status, err)
	} else {
		res.Body.Close()
	}
}

// The status page serves on loopback only.
func TestStatusFlagRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":8080", "example.com:80", "127.0.0.1"} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"-status", addr}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "loopback") {
			t.Errorf("-status %s: exit %d, stderr %q; want 2 and a word about loopback", addr, code, stderr.String())
		}
	}
}
