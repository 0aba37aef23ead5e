package dst_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
			res := runOne(t, dst.Config{Seed: seed, Mix: mixNamed(t, name), Roster: *flagRoster})
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
