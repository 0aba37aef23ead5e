package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/statuspage"
)

type order struct {
	ID string `json:"id"`
}

// brokerWithOneHandled returns a connected broker reading "orders" that has
// handled one order.
func brokerWithOneHandled(t *testing.T) *runtime.Broker {
	t.Helper()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	if _, err := runtime.Subscribe(b, "orders", func(context.Context, order, runtime.Delivery) runtime.Outcome {
		handled <- struct{}{}
		return runtime.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	if err := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: "o-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("the order was not handled within 20 s")
	}
	return b
}

func get(t *testing.T, h http.Handler, host, path string) *http.Response {
	t.Helper()
	req := httptest.NewRequest("GET", "http://"+host+path, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// /status.json is the broker's Status as JSON, uncached.
func TestStatusJSON(t *testing.T) {
	b := brokerWithOneHandled(t)
	h := statuspage.Handler(b)
	var st struct {
		Owner         string `json:"owner"`
		Subscriptions []struct {
			Stream  string `json:"stream"`
			State   string `json:"state"`
			Handled int    `json:"handled"`
			Shards  []struct {
				Shard string `json:"shard"`
			} `json:"shards"`
		} `json:"subscriptions"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := get(t, h, "127.0.0.1:8080", "/status.json")
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("status.json: %s, Content-Type %q, Cache-Control %q", res.Status, res.Header.Get("Content-Type"), res.Header.Get("Cache-Control"))
		}
		raw := body(t, res)
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("status.json: %v\n%s", err, raw)
		}
		if len(st.Subscriptions) == 1 && st.Subscriptions[0].Handled == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.json does not show the one order handled:\n%s", raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sub := st.Subscriptions[0]
	if st.Owner != b.Status().Owner || sub.Stream != "orders" || sub.State != "running" || len(sub.Shards) != 2 {
		t.Errorf("status.json: %+v; want this broker's owner reading both shards of orders", st)
	}
}

// The page, its script and its stylesheet are served from the package,
// with a policy that lets the page load nothing from elsewhere.
func TestAssets(t *testing.T) {
	h := statuspage.Handler(kinesistest.NewBroker())
	for _, c := range []struct{ path, contentType, holds string }{
		{"/", "text/html", `<script src="status.js"`},
		{"/status.js", "text/javascript", `fetch("status.json"`},
		{"/status.css", "text/css", ""},
	} {
		res := get(t, h, "localhost:8080", c.path)
		text := body(t, res)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), c.contentType) || !strings.Contains(text, c.holds) {
			t.Errorf("%s: %s, Content-Type %q, %d bytes; want %s holding %q", c.path, res.Status, res.Header.Get("Content-Type"), len(text), c.contentType, c.holds)
		}
		if res.Header.Get("Content-Security-Policy") != "default-src 'self'" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: CSP %q, X-Content-Type-Options %q", c.path, res.Header.Get("Content-Security-Policy"), res.Header.Get("X-Content-Type-Options"))
		}
		if regexp.MustCompile(`(src|href)="[a-z]*:?//`).MatchString(text) {
			t.Errorf("%s loads something from elsewhere:\n%s", c.path, text)
		}
	}
}

// Only requests addressed to a loopback name are answered: a name rebound
// to 127.0.0.1 (DNS rebinding) is refused.
func TestHostCheck(t *testing.T) {
	h := statuspage.Handler(kinesistest.NewBroker())
	for host, want := range map[string]int{
		"localhost:8080":        http.StatusOK,
		"LOCALHOST":             http.StatusOK,
		"127.0.0.1:8080":        http.StatusOK,
		"127.0.0.2":             http.StatusOK,
		"[::1]:8080":            http.StatusOK,
		"attacker.example":      http.StatusForbidden,
		"attacker.example:8080": http.StatusForbidden,
		"127.0.0.1.nip.io:8080": http.StatusForbidden,
		"localhost.example":     http.StatusForbidden,
		"10.0.0.1:8080":         http.StatusForbidden,
	} {
		for _, path := range []string{"/", "/status.json"} {
			res := get(t, h, host, path)
			if res.StatusCode != want {
				t.Errorf("Host %s, GET %s: %s, want %d", host, path, res.Status, want)
			}
		}
	}
}

// Mounted under a prefix of an application's own mux, the page works there.
func TestUnderAPrefix(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/debug/kinesis/", http.StripPrefix("/debug/kinesis", statuspage.Handler(kinesistest.NewBroker())))
	for _, path := range []string{"/debug/kinesis/", "/debug/kinesis/status.json", "/debug/kinesis/status.js"} {
		if res := get(t, mux, "127.0.0.1", path); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", path, res.Status)
		}
	}
}

// Listen takes loopback addresses only.
func TestListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":8080", "example.com:80", "127.0.0.1", "10.0.0.1:0"} {
		l, err := statuspage.Listen(addr)
		if !errors.Is(err, statuspage.ErrNotLoopback) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Listen(%q): %v; want ErrNotLoopback", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := statuspage.Listen(addr)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		if ip := l.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			t.Errorf("Listen(%q) listens on %v", addr, l.Addr())
		}
		l.Close()
	}
}

// Serve answers until its context ends, then stops and lets the port go.
func TestServe(t *testing.T) {
	l, err := statuspage.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := statuspage.Serve(ctx, l, kinesistest.NewBroker())
	res, err := http.Get("http://" + l.Addr().String() + "/status.json")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET status.json: %v %v", res, err)
	}
	res.Body.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop within 5 s of its context ending")
	}
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the port still takes connections after Serve stopped")
	}
}
