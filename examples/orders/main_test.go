package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
)

// The demo must show every customer's journal and shipments in publish order
// and account for every order in the summary, on both backends.

func TestOrderServiceInProcess(t *testing.T) {
	checkRun(t, []string{"-customers", "8", "-orders", "12"}, 8, 12)
}

func TestOrderServiceOnKinesalite(t *testing.T) {
	endpoint := livetest.KinesisEndpoint(t)
	checkRun(t, []string{"-endpoint", endpoint, "-customers", "5", "-orders", "6"}, 5, 6)
}

func checkRun(t *testing.T, args []string, customers, perCustomer int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("run %v = %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	n := customers * perCustomer
	wantSummary := fmt.Sprintf("summary: %d customers, %d journal entries, %d receipts, %d shipments delivered, 1 dead letters, 0 customers out of order", customers, n, n, n)
	if !strings.Contains(out, wantSummary) {
		t.Fatalf("summary missing; want %q in:\n%s", wantSummary, out)
	}
	for c := 1; c <= customers; c++ {
		var ids []string
		for i := 1; i <= perCustomer; i++ {
			ids = append(ids, fmt.Sprint(c*1000+i))
		}
		list := "[" + strings.Join(ids, " ") + "]"
		line := regexp.MustCompile(fmt.Sprintf(`(?m)^c%02d\s+journal (\[[^\]]*\])\s+receipts (\[[^\]]*\])\s+shipped (\[[^\]]*\])\s+in order$`, c)).FindStringSubmatch(out)
		if line == nil || line[1] != list || line[2] != list || line[3] != list {
			t.Errorf("customer c%02d: want journal, receipts and shipments %s, got %q", c, list, line)
		}
	}
	// The malformed order was read raw from the dead-letter stream, with its
	// bytes, key, origin and reason.
	wantDead := `dead letter: key=c00 data={"id":"legacy-1","customer":"c00"} from=customer-orders reason="kinesis: decode: decode stream=customer-orders`
	if !strings.Contains(out, wantDead) {
		t.Errorf("dead letter missing; want %q in:\n%s", wantDead, out)
	}
}

func TestBadFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-customers", "many"}, &stdout, &stderr); code != 2 {
		t.Fatalf("run with a bad flag = %d, want 2", code)
	}
}
