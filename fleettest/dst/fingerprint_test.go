package dst_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/fleettest/dst"
)

var (
	flagFingerprints = flag.Int("dst.fingerprints", 0, "print the fingerprints of seeds 1..N of each -dst.mix (default basic,twoapps,aggregate): scripts/dst-repro.sh compares two processes' prints")
	flagFPReverse    = flag.Bool("dst.fpreverse", false, "with -dst.fingerprints: run the seeds from N down to 1")
	flagFPDir        = flag.String("dst.fpdir", "", "with -dst.fingerprints: write each run's observations to DIR/MIX-SEED.txt")
)

// TestFingerprints prints, per seed, "FP mix seed sorted ordered": the
// fingerprint of the run's observations sorted (blind to the order of
// goroutines at one virtual instant) and in the order seen.
func TestFingerprints(t *testing.T) {
	if *flagFingerprints == 0 {
		t.Skip("-dst.fingerprints not set")
	}
	mixes := []string{"basic", "twoapps", "aggregate"}
	if *flagMix != "" {
		mixes = strings.Split(*flagMix, ",")
	}
	seeds := seeds(1, uint64(*flagFingerprints))
	if *flagFPReverse {
		slices.Reverse(seeds)
	}
	for _, name := range mixes {
		for _, seed := range seeds {
			res := runOne(t, dst.Config{Seed: seed, Mix: mixNamed(t, name), Roster: *flagRoster, NoRoster: *flagNoRoster})
			fmt.Printf("FP %s %d %s %s\n", name, seed, res.Fingerprint, dst.Fingerprint(res.Observations, false))
			if *flagFPDir != "" {
				f := filepath.Join(*flagFPDir, fmt.Sprintf("%s-%d.txt", name, seed))
				if err := os.WriteFile(f, []byte(strings.Join(res.Observations, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// keylessKeys returns the partition key each keyless message was handled
// with (the runtime's process-unique key), by message id.
func keylessKeys(res *dst.Result) map[int64]string {
	re := regexp.MustCompile(`^\S+ handle \S+ (\d+)#\d+ \S+ key=(\S+) `)
	out := map[int64]string{}
	for _, l := range res.Observations {
		if m := re.FindStringSubmatch(l); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			if id/1_000_000 == 8 { // the keyless publisher's
				out[id] = m[2]
			}
		}
	}
	return out
}

// TestKeylessKeysFollowTheSeed: a schedule's keyless publishes get the
// same keys whenever it runs, also after other schedules in the process
// (the runtime's keys are seeded per schedule). The whole run is not
// compared: which of two goroutines runnable at one instant goes first
// is the Go scheduler's (doc.go, "What may vary").
func TestKeylessKeysFollowTheSeed(t *testing.T) {
	if *flagSeed != 0 || *flagSoak > 0 || *flagHunt > 0 || *flagFingerprints > 0 {
		t.Skip("a seed, soak, hunt or fingerprints run")
	}
	mix := mixNamed(t, "basic")
	first := keylessKeys(runOne(t, dst.Config{Seed: 3, Mix: mix}))
	runOne(t, dst.Config{Seed: 4, Mix: mix})
	again := keylessKeys(runOne(t, dst.Config{Seed: 3, Mix: mix}))
	common := 0
	for id, k := range first {
		if k2, ok := again[id]; ok {
			common++
			if k != k2 {
				t.Errorf("keyless message %d had key %s, run again %s", id, k, k2)
			}
		}
	}
	if common < 5 {
		t.Fatalf("only %d keyless messages handled in both runs (%d, %d)", common, len(first), len(again))
	}
	t.Logf("%d keyless messages handled in both runs", common)
}
