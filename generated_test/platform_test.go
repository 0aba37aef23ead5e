package generatedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

// The packages of TestSamePlatformIndependent: portable has platform files
// without markers, native is a cgo package whose plain file uses its cgo
// file, and guarded has markers and tags in constrained files.
var platformFiles = map[string]string{
	"portable/portable.go": `package portable

import "context"

// Ping is published everywhere.
//
//kinesis:message stream=portable.pings
type Ping struct{ At int64 }

// Handle calls the platform's own code.
//
//kinesis:subscriber stream=portable.pings
func Handle(ctx context.Context, msg Ping) error { return platform(msg) }
`,
	"portable/platform_linux.go": "package portable\n\nfunc platform(Ping) error { return nil }\n",
	"portable/platform_other.go": "//go:build !linux\n\npackage portable\n\nfunc platform(Ping) error { return nil }\n",

	"native/native.go": `package native

// Sample carries what the C library measured.
//
//kinesis:message stream=native.samples
type Sample struct{ Size int }

// Measure asks the C library.
func Measure() Sample { return Sample{Size: size()} }
`,
	"native/cgo.go": "package native\n\n// static int sz(void) { return 4; }\nimport \"C\"\n\nfunc size() int { return int(C.sz()) }\n",

	"winonly/w_windows.go": "package winonly\n\n// W exists on Windows only.\n//\n//kinesis:message stream=winonly\ntype W struct{}\n",

	"guarded/guarded.go": `package guarded

import "context"

// Event is published everywhere.
//
//kinesis:message stream=guarded.events
type Event struct{ ID int }

var _ = context.Background
`,
	"guarded/handle_linux.go": `package guarded

import "context"

// HandleLinux exists on Linux only.
//
//kinesis:subscriber stream=guarded.events
func HandleLinux(ctx context.Context, msg Event) error { return nil }
`,
	"guarded/meta.go": `//go:build !windows

package guarded

// Meta is a header contract of some platforms.
type Meta struct {
	Trace string ` + "`kinesis:\"trace\"`" + `
}
`,
	"guarded/cmsg.go": `package guarded

// #include <stdlib.h>
import "C"

// Blob exists in cgo builds only.
//
//kinesis:message stream=guarded.blobs
type Blob struct{ N int }

var _ = C.free
`,
}

// TestSameOnEveryPlatform: kinesis_gen.go is one file for every GOOS,
// GOARCH and cgo setting, so the generator's result may not depend on the
// configuration it runs under, and what it writes builds under each.
// Markers and tags in files that only some builds compile are refused,
// under every configuration alike.
func TestSameOnEveryPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module for three platforms")
	}
	dir := gentest.Module(t, "", platformFiles)
	configs := [][]string{
		{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=1"},
		{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
		{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0"},
		{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"},
		{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "CC=/nonexistent/cc"}, // cgo off, no C compiler to turn it on
		{"GOOS=darwin", "GOARCH=amd64", "CC=/nonexistent/cc"},                 // cgo off by default: no C compiler
	}
	type outcome struct {
		Files       map[string]string
		Diagnostics []string
	}
	var first outcome
	for i, c := range configs {
		res, err := gen.Generate(gen.Config{Dir: dir, Env: append(gentest.Env(), c...)}, "./...")
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		got := outcome{Files: map[string]string{}}
		for _, f := range res.Files {
			rel, _ := filepath.Rel(dir, f.Path)
			got.Files[filepath.ToSlash(rel)] = string(f.Content)
		}
		for _, d := range res.Diagnostics {
			got.Diagnostics = append(got.Diagnostics, d.String())
		}
		if i == 0 {
			first = got
			want := []string{
				"guarded/cmsg.go:8:1: //kinesis:message in a file that imports \"C\", which only cgo builds compile; kinesis_gen.go is the same file for every build, so put the declaration in a file that every build compiles",
				"guarded/handle_linux.go:7:1: //kinesis:subscriber in a file that only some builds compile (its name ends in _linux); kinesis_gen.go is the same file for every build, so put the declaration in a file that every build compiles (it may call platform-specific code)",
				"guarded/meta.go:7:2: kinesis tag on field Trace of Meta in a file that only some builds compile (//go:build !windows); kinesis_gen.go is the same file for every build, so put the header contract in a file that every build compiles",
				"winonly/w_windows.go:5:1: //kinesis:message in a file that only some builds compile (its name ends in _windows); kinesis_gen.go is the same file for every build, so put the declaration in a file that every build compiles",
			}
			if diff := cmp.Diff(want, got.Diagnostics); diff != "" {
				t.Errorf("%v: diagnostics (-want +got):\n%s", c, diff)
			}
			continue
		}
		if diff := cmp.Diff(first, got); diff != "" {
			t.Errorf("%v differs from %v (-first +this):\n%s", c, configs[0], diff)
		}
	}

	// Without the refused package, the others generate, and what is
	// written vets and builds under each configuration.
	for _, name := range []string{"guarded", "winonly"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := gen.Generate(gen.Config{Dir: dir, Env: gentest.Env()}, "./...")
	if err != nil || len(res.Diagnostics) > 0 || len(res.Files) != 2 {
		t.Fatalf("generate: %v, diagnostics %v, %d files", err, res.Diagnostics, len(res.Files))
	}
	for _, f := range res.Files {
		if err := os.WriteFile(f.Path, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := func(pkg string, env ...string) {
		cmd := exec.Command("go", "vet", pkg)
		cmd.Dir = dir
		cmd.Env = append(gentest.Env(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v go vet %s: %v\n%s", env, pkg, err, out)
		}
	}
	vet("./portable", "GOOS=linux", "CGO_ENABLED=0")
	vet("./portable", "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	vet("./portable", "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	vet("./native", "GOOS=linux", "CGO_ENABLED=1")
	if out := gentest.Go(t, dir, "list", "-f", "{{.GoFiles}}", "./native"); !strings.Contains(out, gen.FileName) {
		t.Errorf("native lists %s", out)
	}
}
