package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The command end to end: every reading handled, every sensor in order,
// and far fewer Kinesis records than readings.
func TestRunKeepsEachSensorsOrder(t *testing.T) {
	checkRun(t, []string{"-goroutines", "16", "-sensors", "200", "-readings", "50", "-batch", "64"}, 10000)
}

// Over the wire, against the emulator on a loopback port.
func TestRunOverTheWire(t *testing.T) {
	ep := kinesistest.ServeLocal(t)
	checkRun(t, []string{"-endpoint", ep.URL(), "-goroutines", "4", "-sensors", "40", "-readings", "25"}, 1000)
}

func checkRun(t *testing.T, args []string, total int) {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "handled all "+strconv.Itoa(total)+", every sensor in order") {
		t.Fatalf("output:\n%s", out.String())
	}
	m := regexp.MustCompile(`in (\d+) Kinesis records`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no record count in:\n%s", out.String())
	}
	if records, _ := strconv.Atoi(m[1]); records*10 > total {
		t.Errorf("%d Kinesis records for %d readings: want at least 10 readings a record", records, total)
	}
}

func TestRunBadFlag(t *testing.T) {
	if err := run(t.Context(), []string{"-sensors", "2", "-goroutines", "4"}, new(bytes.Buffer)); err == nil {
		t.Fatal("fewer sensors than goroutines: no error")
	}
}

// The checker itself: a redelivery is ignored, a gap is reported.
func TestCheckerReportsAGap(t *testing.T) {
	c := NewChecker(3)
	for _, seq := range []int{1, 1, 3, 4} {
		_ = c.Check(t.Context(), Reading{Sensor: "s", Seq: seq})
	}
	problems, err := c.Wait(t.Context())
	if err != nil || len(problems) != 1 || problems[0] != "sensor s: reading 3 after 1" {
		t.Fatalf("problems %q, %v; want the gap from 1 to 3", problems, err)
	}
}
