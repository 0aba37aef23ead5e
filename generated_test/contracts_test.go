package generatedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/internal/contract"
	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
)

// contractDirs are the packages whose committed kinesis.lock.json and
// asyncapi.yaml (written by their go:generate line) are golden files.
var contractDirs = []string{"headers", "keys", "odd", "publishonly", "shapes", "../examples/orders"}

// TestContractsGolden regenerates each package's lock and AsyncAPI
// document as its go:generate line does and compares them with the
// committed files (go test ./generated_test -update rewrites them).
func TestContractsGolden(t *testing.T) {
	for _, dir := range contractDirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			res, err := gen.Generate(gen.Config{Dir: dir, AsyncAPI: "asyncapi.yaml"}, ".")
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
			if diff := cmp.Diff([]string{"asyncapi.yaml", contract.LockFile}, names); diff != "" {
				t.Errorf("contract files (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAsyncAPIParser validates every committed AsyncAPI document, and one
// generated as JSON, with the AsyncAPI Initiative's parser
// (scripts/validate-asyncapi.js, @asyncapi/parser from the committed npm
// lockfile): any error or warning fails. Under make test a missing node or
// parser fails the test; elsewhere it skips saying how to run it.
func TestAsyncAPIParser(t *testing.T) {
	root := gentest.Root(t)
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(root, "node_modules", "@asyncapi", "parser", "package.json"))
	}
	if err != nil {
		if os.Getenv(livetest.EnvRequired) == "required" {
			t.Fatalf("the AsyncAPI parser cannot run (%v) but %s=required: scripts/with-servers.sh installs it with npm ci", err, livetest.EnvRequired)
		}
		t.Skipf("the AsyncAPI parser cannot run (%v): run make test, which installs it with npm ci", err)
	}
	docs := []string{}
	for _, dir := range contractDirs {
		p, err := filepath.Abs(filepath.Join(dir, "asyncapi.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, p)
	}
	// Every package of this directory in one document, as JSON.
	all := filepath.Join(t.TempDir(), "all.json")
	res, err := gen.Generate(gen.Config{Dir: ".", AsyncAPI: all}, "./...")
	if err != nil || len(res.Diagnostics) > 0 {
		t.Fatalf("%v %v", err, res.Diagnostics)
	}
	for _, f := range res.Contracts {
		if f.Path == all {
			if err := os.WriteFile(all, f.Content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	docs = append(docs, all)

	validate := func(files ...string) (string, error) {
		cmd := exec.Command(node, append([]string{filepath.Join(root, "scripts", "validate-asyncapi.js")}, files...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := validate(docs...)
	if err != nil {
		t.Fatalf("the AsyncAPI parser refused a document (%v):\n%s", err, out)
	}
	for _, doc := range docs {
		if !strings.Contains(out, doc+": AsyncAPI 3.0.0, ") {
			t.Errorf("no verdict on %s:\n%s", doc, out)
		}
	}

	// The control: a document whose operation names a channel it lacks.
	src, err := os.ReadFile(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	bad := strings.Replace(string(src), `$ref: "#/channels/`, `$ref: "#/channels/no-such-`, 1)
	if err := os.WriteFile(broken, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := validate(broken); err == nil || !strings.Contains(out, ": error: ") {
		t.Errorf("a broken document passed (%v):\n%s", err, out)
	}
}
