package generatedtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/internal/contract"
	"github.com/kinesisgen/kinesisgen/internal/gen"
)

// contractDirs are the packages whose committed kinesis.lock.json is a
// golden file.
var contractDirs = []string{"headers", "keys", "publishonly", "shapes", "../examples/orders"}

// TestContractsGolden regenerates each package's lock as its go:generate
// line does and compares it with the committed file (go test
// ./generated_test -update rewrites it).
func TestContractsGolden(t *testing.T) {
	for _, dir := range contractDirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			res, err := gen.Generate(gen.Config{Dir: dir}, ".")
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range res.Diagnostics {
				t.Errorf("diagnostic: %s", d)
			}
			var names []string
			for _, f := range res.Contracts {
				names = append(names, filepath.Base(f.Path))
				if *update {
					if err := os.WriteFile(f.Path, f.Content, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(f.Path)
				if err != nil {
					t.Fatalf("%v (run go test ./generated_test -update)", err)
				}
				if diff := cmp.Diff(string(want), string(f.Content)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", filepath.Base(f.Path), diff)
				}
			}
			if diff := cmp.Diff([]string{contract.LockFile}, names); diff != "" {
				t.Errorf("contract files (-want +got):\n%s", diff)
			}
		})
	}
}
