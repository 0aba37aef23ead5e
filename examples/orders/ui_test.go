//go:build ui

// The status page in a real headless browser: make test-ui (which installs
// Debian's chromium and chromium-driver when they are missing) runs
//
//	go test -tags ui -run TestStatusPageInBrowser ./examples/orders
//
// It builds the demo, starts it with -status, and drives chromium through
// chromedriver over the WebDriver protocol (plain HTTP and JSON). CHROMIUM
// and CHROMEDRIVER name other binaries.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatusPageInBrowser(t *testing.T) {
	chromium := binary(t, "CHROMIUM", "chromium")
	driver := startChromedriver(t, binary(t, "CHROMEDRIVER", "chromedriver"))
	page := startDemo(t)

	s := driver.newSession(t, chromium)
	s.post(t, "/url", map[string]any{"url": page}, nil)

	// The page fills in from status.json: a table per subscription, its
	// shards as rows, the instance line on top.
	rows := s.waitRows(t, "customer-orders", "the order stream's two shards, reading, with a checkpoint", func(rows [][]string) bool {
		return len(rows) == 2 && rows[0][2] == "reading" && rows[1][2] == "reading" &&
			rows[0][3] != "none yet" && rows[1][3] != "none yet"
	})
	if got := s.texts(t, `section[data-stream="customer-orders"] thead th`); strings.Join(got, "|") != "Shard|Owner|Lease|Checkpoint|Stored|Behind|Reads|Handled|Per second|Outcomes|In flight" {
		t.Errorf("column headings %q", got)
	}
	for i, want := range []string{"shardId-000000000000", "shardId-000000000001"} {
		r := rows[i]
		if r[0] != want || r[1] != "this instance" {
			t.Errorf("row %d: shard %q owner %q; want %s held by this instance", i, r[0], r[1], want)
		}
		if !regexp.MustCompile(`^[0-9]{20,}$`).MatchString(r[3]) {
			t.Errorf("row %d: checkpoint %q, want a sequence number", i, r[3])
		}
		if !regexp.MustCompile(`^[0-9.]+ s ago$`).MatchString(r[4]) {
			t.Errorf("row %d: checkpoint stored %q, want seconds ago", i, r[4])
		}
		if !regexp.MustCompile(`^[0-9.]+ (ms|s|min)$`).MatchString(r[5]) {
			t.Errorf("row %d: behind %q, want a duration", i, r[5])
		}
		if r[6] != "ok" {
			t.Errorf("row %d: reads %q, want ok", i, r[6])
		}
		if !regexp.MustCompile(`^[0-9,]+ / 0 / 0 / [01]$`).MatchString(r[9]) {
			t.Errorf("row %d: outcomes %q, want acked / 0 / 0 / 0 or 1", i, r[9])
		}
	}
	owner := s.texts(t, "#owner")
	instance := s.texts(t, "#instance")
	if len(owner) != 1 || owner[0] == "" || len(instance) != 1 || !strings.Contains(instance[0], "leases held 7, taken 7, lost 0, handed over 0") {
		t.Errorf("instance line %q (owner %q)", instance, owner)
	}
	if got := s.texts(t, "section h2"); len(got) != 5 {
		t.Errorf("subscription headings %q, want the 5 subscriptions", got)
	}

	// The service keeps taking orders: the shipments' handled counts rise
	// on the page, without a reload.
	handled := func(rows [][]string) int {
		n := 0
		for _, r := range rows {
			v, err := strconv.Atoi(strings.ReplaceAll(r[7], ",", ""))
			if err != nil {
				t.Fatalf("handled cell %q: %v", r[7], err)
			}
			n += v
		}
		return n
	}
	before := handled(s.waitRows(t, "shipments", "the shipments' shards", func(rows [][]string) bool { return len(rows) == 2 }))
	s.waitRows(t, "shipments", fmt.Sprintf("shipments handled rising past %d", before+5), func(rows [][]string) bool {
		return len(rows) == 2 && handled(rows) >= before+5
	})
}

// binary finds a program named by env, else on the PATH; missing, the
// test fails: make test-ui installs them.
func binary(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (make test-ui installs chromium and chromium-driver; %s names another): %v", name, env, err)
	}
	return p
}

// startDemo builds the demo and runs it with -status on a free loopback
// port; it returns the page's URL. At the end it interrupts the service,
// which must exit 0.
func startDemo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orders")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-status", "127.0.0.1:0", "-customers", "4", "-orders", "5", "-pace", "50ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "status page: "); ok {
				urls <- u
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the demo exited with %v after Ctrl-C\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the demo did not stop within 20 s of Ctrl-C")
		}
	})
	select {
	case u := <-urls:
		return u
	case err := <-exited:
		t.Fatalf("the demo exited before serving: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the demo printed no status page address within 30 s\n%s", stderr.String())
	}
	return ""
}

// webDriver is a chromedriver process and its HTTP endpoint.
type webDriver struct{ base string }

func startChromedriver(t *testing.T, path string) *webDriver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(path, "--port="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	d := &webDriver{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(20 * time.Second); ; {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := d.call("GET", "/status", nil, &st); err == nil && st.Ready {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver not ready within 20 s: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call sends one WebDriver command and decodes the answer's value into out.
func (d *webDriver) call(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, raw)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, env.Value)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(env.Value, out)
}

// session is one browser.
type session struct {
	d  *webDriver
	id string
}

func (d *webDriver) newSession(t *testing.T, chromium string) *session {
	t.Helper()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chromium,
			// No sandbox: the test may run as root (a CI container).
			"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"},
		},
	}}}
	var out struct {
		SessionID string `json:"sessionId"`
	}
	if err := d.call("POST", "/session", caps, &out); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	s := &session{d: d, id: out.SessionID}
	t.Cleanup(func() { _ = d.call("DELETE", "/session/"+s.id, nil, nil) })
	return s
}

func (s *session) post(t *testing.T, path string, in, out any) {
	t.Helper()
	if err := s.d.call("POST", "/session/"+s.id+path, in, out); err != nil {
		t.Fatal(err)
	}
}

// texts returns the rendered text (innerText: what a person reads) of
// every element matching css, read in one script so that the page's
// refresh cannot fall between two of them.
func (s *session) texts(t *testing.T, css string) []string {
	t.Helper()
	var out []string
	s.post(t, "/execute/sync", map[string]any{
		"script": "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText.trim());",
		"args":   []any{css},
	}, &out)
	return out
}

// rows reads the shard table of stream: a row of cell texts per shard.
func (s *session) rows(t *testing.T, stream string) [][]string {
	t.Helper()
	var rows [][]string
	s.post(t, "/execute/sync", map[string]any{
		"script": "return [...document.querySelectorAll(`section[data-stream=\"${arguments[0]}\"] tbody tr`)]" +
			".map((tr) => [...tr.cells].map((td) => td.innerText.trim()));",
		"args": []any{stream},
	}, &rows)
	return rows
}

// waitRows reads stream's table until cond holds (20 s at most).
func (s *session) waitRows(t *testing.T, stream, what string, cond func([][]string) bool) [][]string {
	t.Helper()
	var rows [][]string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if rows = s.rows(t, stream); cond(rows) {
			return rows
		}
	}
	t.Fatalf("%s: not on the page within 20 s; the %s table read %q", what, stream, rows)
	return nil
}
