package generatedtest

import (
	"bytes"
	"flag"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/annotations"
	"github.com/kinesisgen/kinesisgen/internal/gen"
)

var update = flag.Bool("update", false, "rewrite the committed kinesis_gen.go files and expected stderr")

// TestGolden regenerates every input package below this directory and
// compares the result with the committed kinesis_gen.go.
func TestGolden(t *testing.T) {
	res, err := gen.Generate(gen.Config{Dir: "."}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Diagnostics {
		t.Errorf("unexpected diagnostic: %s", d)
	}
	if len(res.Remove) != 0 {
		t.Errorf("Remove = %v, want none", res.Remove)
	}
	wantDirs := []string{"clash/ctx", "clash/d", "clash", "clash/msg", "embedded", "headers", "keys", "numkey", "odd", "publishonly", "shapes"}
	var gotDirs []string
	for _, f := range res.Files {
		rel, _ := filepath.Rel(mustAbs(t, "."), f.Path)
		gotDirs = append(gotDirs, filepath.Dir(rel))
		if formatted, err := format.Source(f.Content); err != nil || !bytes.Equal(formatted, f.Content) {
			t.Errorf("%s is not gofmt's output (%v)", rel, err)
		}
		if *update {
			if err := os.WriteFile(f.Path, f.Content, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatalf("%s: %v (run go test ./generated_test -update)", rel, err)
		}
		if diff := cmp.Diff(string(want), string(f.Content)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", rel, diff)
		}
	}
	if diff := cmp.Diff(wantDirs, gotDirs); diff != "" {
		t.Errorf("generated packages (-want +got):\n%s", diff)
	}
}

// TestGenerateTwice checks that output is byte-identical from run to run.
func TestGenerateTwice(t *testing.T) {
	first, err := gen.Generate(gen.Config{Dir: "."}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	second, err := gen.Generate(gen.Config{Dir: "."}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.Files, second.Files); diff != "" {
		t.Errorf("second run differs (-first +second):\n%s", diff)
	}
}

// TestDiagnostics runs the generator once over every directory of
// testdata/diag (one package per diagnostic) and compares each directory's
// diagnostics with its stderr file.
func TestDiagnostics(t *testing.T) {
	root := filepath.Join("testdata", "diag")
	dirs, err := filepath.Glob(filepath.Join(root, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no diagnostic cases: %v", err)
	}
	res, err := gen.Generate(gen.Config{Dir: root}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 0 || len(res.Remove) != 0 {
		t.Errorf("with diagnostics the result must write nothing; got %d files, %d removals", len(res.Files), len(res.Remove))
	}
	byCase := map[string]*strings.Builder{}
	for _, d := range res.Diagnostics {
		if crossCase(d) {
			continue
		}
		name, rest, _ := strings.Cut(filepath.ToSlash(d.Pos.Filename), "/")
		if byCase[name] == nil {
			byCase[name] = &strings.Builder{}
		}
		d.Pos.Filename = rest
		byCase[name].WriteString(d.String() + "\n")
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			var got string
			if b := byCase[name]; b != nil {
				got = b.String()
			}
			stderr := filepath.Join(dir, "stderr")
			if *update {
				if err := os.WriteFile(stderr, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(stderr)
			if err != nil {
				t.Fatal(err)
			}
			if got == "" {
				t.Error("no diagnostic at all")
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

// crossCaseRE finds the position of another package's declaration in a
// diagnostic of the checks across packages, and its case directory.
var crossCaseRE = regexp.MustCompile(`\(([^/()]+)/[^()]*:\d+:\d+\)`)

// crossCase reports whether d, of a run over many case directories at
// once, pairs two cases: the checks across packages see the streams of one
// case on the types of another, which is no case's own diagnostic.
func crossCase(d annotations.Diagnostic) bool {
	name, _, _ := strings.Cut(filepath.ToSlash(d.Pos.Filename), "/")
	ref := crossCaseRE.FindStringSubmatch(d.Msg)
	return ref != nil && ref[1] != name
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestForgivesMissingGeneratedNames: a package that already uses Mount,
// NewXPublisher and the header methods generates although kinesis_gen.go is
// missing (fresh) or names things that are gone (stale).
func TestForgivesMissingGeneratedNames(t *testing.T) {
	for _, name := range []string{"fresh", "stale"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "ok", name)
			res, err := gen.Generate(gen.Config{Dir: dir}, ".")
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range res.Diagnostics {
				t.Errorf("diagnostic: %s", d)
			}
			if len(res.Files) != 1 || filepath.Base(res.Files[0].Path) != gen.FileName {
				t.Fatalf("files = %v, want one %s", res.Files, gen.FileName)
			}
			src := string(res.Files[0].Content)
			for _, want := range []string{"func NewEntryPublisher(", "func (h Key) EncodeHeaders(", "func (h *Key) DecodeHeaders(", "func Mount(b *runtime.Broker, service *Service) error"} {
				if !strings.Contains(src, want) {
					t.Errorf("generated file lacks %q", want)
				}
			}
			if strings.Contains(src, "OldHandler") {
				t.Error("the stale file's contents leaked into the output")
			}
		})
	}
}

// TestForgivesAcrossPackages: a package of the run may use what the run
// generates for another one (orders.Mount, orders.Key.DecodeHeaders).
func TestForgivesAcrossPackages(t *testing.T) {
	dir := filepath.Join("testdata", "ok", "crosspkg")
	res, err := gen.Generate(gen.Config{Dir: dir}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Diagnostics {
		t.Errorf("diagnostic: %s", d)
	}
	if len(res.Files) != 2 || res.Files[1].Path != filepath.Join(mustAbs(t, dir), "orders", gen.FileName) {
		t.Errorf("files %v, want %s and orders/%s", res.Files, gen.FileName, gen.FileName)
	}
}

// TestForgivesDependency: run in one package only, names that generating a
// dependency will declare are forgiven (go generate ./... may reach the
// dependency after its user); a name it will not declare is still an error.
func TestForgivesDependency(t *testing.T) {
	res, err := gen.Generate(gen.Config{Dir: filepath.Join("testdata", "depmissing")}, ".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Diagnostics {
		got = append(got, d.String())
	}
	want := []string{"main.go:19:13: undefined: orders.NewRefundPublisher"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}

// TestRemovesStaleFile: a package whose last marker went keeps no kinesis_gen.go.
func TestRemovesStaleFile(t *testing.T) {
	dir := filepath.Join("testdata", "ok", "unmarked")
	res, err := gen.Generate(gen.Config{Dir: dir}, ".")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(mustAbs(t, dir), gen.FileName)}
	if diff := cmp.Diff(want, res.Remove); diff != "" || len(res.Files) != 0 || len(res.Diagnostics) != 0 {
		t.Errorf("Remove (-want +got):\n%s\nfiles %v, diagnostics %v", diff, res.Files, res.Diagnostics)
	}
}

// TestStreamOfADependency: go generate runs one package at a time, so a
// handler's stream is checked against the marker of a message type of
// another package read from source when that package is not in the run.
func TestStreamOfADependency(t *testing.T) {
	dir := filepath.Join("testdata", "diag", "cross_package_streams", "billing")
	res, err := gen.Generate(gen.Config{Dir: dir}, ".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Diagnostics {
		got = append(got, d.String())
	}
	want := []string{"in.go:11:22: stream=orders.created, but handler Charge takes orders.Placed, a //kinesis:message of stream orders.placed (../orders/in.go:5:1)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}
