// Package faultproxy is an HTTP proxy for tests that sits in front of a local
// AWS JSON-protocol server (kinesalite, dynalite) and injects the faults an
// operator meets on a bad day: throttling and internal-failure answers,
// connections reset before or after the server applied a request, added
// latency, expired iterators, and a black hole that accepts requests and
// never answers.
//
// Faults are chosen per operation (the X-Amz-Target header) and by rate. The
// n-th request of an operation gets the same decision for the same seed and
// rules, whatever the timing, so a run can be repeated; every rule can be
// bounded in count and in time. The proxy listens on 127.0.0.1 and forwards
// only to a loopback upstream.
package faultproxy

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Fault is what the proxy does to a request a rule picked.
type Fault int

const (
	// Throttle answers 400 with the service's throttling error for the
	// operation (Rule.Code overrides it); the server never sees the request.
	Throttle Fault = iota
	// InternalFailure answers 500 (InternalFailure on Kinesis,
	// InternalServerError on DynamoDB); the server never sees the request.
	InternalFailure
	// ResetBefore resets the connection without forwarding the request.
	ResetBefore
	// ResetAfter forwards the request, reads the server's whole answer and
	// resets the connection instead of passing it on: the server applied a
	// request whose caller sees a transport error.
	ResetAfter
	// Latency waits Rule.Delay before forwarding. Unlike the other faults it
	// combines with the next rule that matches.
	Latency
	// ExpireIterator answers 400 ExpiredIteratorException (meant for GetRecords).
	ExpireIterator
	// BlackHole reads the request and never answers: the request is held
	// until its caller gives up or the proxy closes, even after the rule has
	// ended. New requests pass again once the rule's For has run out.
	BlackHole
	faultCount
)

var faultNames = [faultCount]string{"throttle", "internal-failure", "reset-before", "reset-after", "latency", "expired-iterator", "black-hole"}

func (f Fault) String() string {
	if f < 0 || f >= faultCount {
		return fmt.Sprintf("Fault(%d)", int(f))
	}
	return faultNames[f]
}

// Rule injects one fault into a share of the requests of some operations.
type Rule struct {
	Ops   []string      // operation names, e.g. "PutRecords", "UpdateItem"; none: every operation
	Fault Fault         //
	Rate  float64       // share of the matching requests, in (0, 1]
	Delay time.Duration // Latency: the added delay
	Code  string        // Throttle: the error code, instead of the service's usual one
	Max   int           // at most this many injections; 0: no bound
	For   time.Duration // the rule ends this long after Set; 0: when the rules are next set
}

func (r *Rule) validate() error {
	switch {
	case r.Fault < 0 || r.Fault >= faultCount:
		return fmt.Errorf("faultproxy: unknown fault %v", r.Fault)
	case !(r.Rate > 0 && r.Rate <= 1):
		return fmt.Errorf("faultproxy: %v rule: rate %v is not in (0, 1]", r.Fault, r.Rate)
	case r.Fault == Latency && r.Delay <= 0:
		return fmt.Errorf("faultproxy: latency rule without a delay")
	case r.Max < 0 || r.For < 0:
		return fmt.Errorf("faultproxy: %v rule: negative bound", r.Fault)
	}
	return nil
}

func (r *Rule) matches(op string) bool {
	if len(r.Ops) == 0 {
		return true
	}
	for _, o := range r.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Injection counts one fault injected into one operation.
type Injection struct {
	Op    string
	Fault Fault
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream  *url.URL
	seed      uint64
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	closing   chan struct{} // closed by Close: releases the held requests
	closeOnce sync.Once
	served    sync.WaitGroup

	mu         sync.Mutex
	rules      []activeRule
	generation int                 // bumped by Set, so a new rule set draws new decisions
	requests   map[string]int64    // per operation, every request received
	injected   map[Injection]int64 // per operation and fault
	nth        map[string]uint64   // per operation, the decision counter
}

type activeRule struct {
	Rule
	until    time.Time // zero: no end
	injected int
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to upstream,
// an http URL on a loopback address; seed fixes the fault decisions.
func New(upstream string, seed uint64) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("faultproxy: upstream %q: only http is proxied", upstream)
	}
	if !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("faultproxy: upstream %q is not a loopback address", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		upstream: u,
		seed:     seed,
		ln:       ln,
		transport: &http.Transport{
			Proxy:               nil,
			DisableCompression:  true, // pass the body through byte for byte (DynamoDB checksums it)
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
		closing:  make(chan struct{}),
		requests: make(map[string]int64),
		injected: make(map[Injection]int64),
		nth:      make(map[string]uint64),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	p.served.Add(1)
	go func() {
		defer p.served.Done()
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL is the proxy's endpoint, to give a client instead of the upstream's.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Set replaces the rules; the first rule that matches a request and picks
// it decides its fault (a Latency rule delays it and lets the next decide).
// Set with no rules makes the proxy transparent again; requests already
// held by a black hole stay held.
func (p *Proxy) Set(rules ...Rule) error {
	now := time.Now()
	active := make([]activeRule, 0, len(rules))
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return err
		}
		a := activeRule{Rule: r}
		a.Ops = append([]string(nil), r.Ops...)
		if r.For > 0 {
			a.until = now.Add(r.For)
		}
		active = append(active, a)
	}
	p.mu.Lock()
	p.rules = active
	p.generation++
	p.mu.Unlock()
	return nil
}

// Requests returns how many requests of op the proxy has received.
func (p *Proxy) Requests(op string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[op]
}

// Injected returns how many faults were injected, per operation and fault.
func (p *Proxy) Injected() map[Injection]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Injection]int64, len(p.injected))
	for k, v := range p.injected {
		out[k] = v
	}
	return out
}

// Close stops the proxy: it closes the listener and every connection,
// releases the held requests and waits for the handlers to return.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closing)
		err = p.srv.Close()
		p.served.Wait()
		p.transport.CloseIdleConnections()
	})
	return err
}

// decide picks the request's faults: a delay (zero for none) and the fault
// that decides its fate (ok false: forward it).
func (p *Proxy) decide(op string) (delay time.Duration, rule Rule, ok bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[op]++
	n := p.nth[op]
	p.nth[op]++
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matches(op) || (!r.until.IsZero() && now.After(r.until)) || (r.Max > 0 && r.injected >= r.Max) {
			continue
		}
		if unit(p.seed, uint64(p.generation), uint64(i), op, n) >= r.Rate {
			continue
		}
		r.injected++
		p.injected[Injection{Op: op, Fault: r.Fault}]++
		if r.Fault == Latency {
			delay += r.Delay
			continue
		}
		return delay, r.Rule, true
	}
	return delay, Rule{}, false
}

// unit maps (seed, rule set, rule, operation, n) to a number in [0, 1).
func unit(seed, generation, rule uint64, op string, n uint64) float64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, op)
	x := splitmix(seed ^ splitmix(generation<<32|rule) ^ splitmix(h.Sum64()) ^ splitmix(n+0x9e3779b97f4a7c15))
	return float64(x>>11) / (1 << 53)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// target splits X-Amz-Target ("Kinesis_20131202.PutRecords") into the
// service prefix and the operation.
func target(r *http.Request) (service, op string) {
	t := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return "", t
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	service, op := target(r)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-request
	}
	delay, rule, faulty := p.decide(op)
	if delay > 0 && !p.wait(r.Context(), delay) {
		return
	}
	if !faulty {
		p.forward(w, r, body, false)
		return
	}
	switch rule.Fault {
	case Throttle:
		code := rule.Code
		if code == "" {
			code = throttleCode(service, op)
		}
		writeError(w, service, http.StatusBadRequest, code, "Rate exceeded (injected by faultproxy)")
	case InternalFailure:
		code := "InternalFailure"
		if isDynamoDB(service) {
			code = "InternalServerError"
		}
		writeError(w, service, http.StatusInternalServerError, code, "Internal service failure (injected by faultproxy)")
	case ExpireIterator:
		writeError(w, service, http.StatusBadRequest, "ExpiredIteratorException", "Iterator expired (injected by faultproxy)")
	case ResetBefore:
		reset(w)
	case ResetAfter:
		p.forward(w, r, body, true)
	case BlackHole:
		select {
		case <-r.Context().Done(): // the caller gave up and closed the connection
		case <-p.closing:
		}
		reset(w)
	}
}

// wait sleeps d unless the request or the proxy ends first.
func (p *Proxy) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-p.closing:
	}
	return false
}

// forward sends the request upstream and passes the answer on, or, when
// drop is set, reads the whole answer and resets the connection instead.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, drop bool) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream.JoinPath(r.URL.Path).String(), bytes.NewReader(body))
	if err != nil {
		reset(w)
		return
	}
	out.URL.RawQuery = r.URL.RawQuery
	for name, vs := range r.Header {
		if !hopByHop(name) {
			out.Header[name] = vs
		}
	}
	out.Host = r.Host
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		// The upstream is down or the caller left: a transport error for the caller too.
		reset(w)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || drop {
		reset(w)
		return
	}
	for name, vs := range resp.Header {
		if !hopByHop(name) {
			w.Header()[name] = vs
		}
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func hopByHop(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length":
		return true
	}
	return false
}

// reset closes the client's connection with a TCP RST, so that the caller
// sees "connection reset by peer" rather than an answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: the response writer cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func isDynamoDB(service string) bool { return strings.HasPrefix(service, "DynamoDB") }

// throttleCode is the error a throttled operation answers with on the real
// service: per-shard and per-table limits on the data plane, request-rate
// limits on the control plane.
func throttleCode(service, op string) string {
	if isDynamoDB(service) {
		switch op {
		case "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem", "BatchWriteItem", "TransactGetItems", "TransactWriteItems":
			return "ProvisionedThroughputExceededException"
		}
		return "ThrottlingException"
	}
	switch op {
	case "PutRecord", "PutRecords", "GetRecords", "GetShardIterator":
		return "ProvisionedThroughputExceededException"
	}
	return "LimitExceededException"
}

// writeError answers in the service's JSON error shape.
func writeError(w http.ResponseWriter, service string, status int, code, message string) {
	typ := code
	contentType := "application/x-amz-json-1.1"
	if isDynamoDB(service) {
		typ = "com.amazonaws.dynamodb.v20120810#" + code
		contentType = "application/x-amz-json-1.0"
	}
	b := fmt.Appendf(nil, `{"__type":%q,"message":%q}`, typ, message)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Amzn-Requestid", "faultproxy")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
