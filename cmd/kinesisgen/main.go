// Command kinesisgen writes kinesis_gen.go — typed publishers, header
// contracts and handler mounts — for every package with //kinesis: markers.
//
// Usage:
//
//	kinesisgen [-check] [-lock] [-asyncapi FILE] [-v] [packages]
//
// Run it from //go:generate go tool kinesisgen in a package directory, or as
// kinesisgen ./... over package patterns ("." by default). It reports every
// problem as path:line:col: message and writes nothing when there is one.
// Beside kinesis_gen.go it keeps kinesis.lock.json, the package's message
// contract: a change to a message that records already on a stream could no
// longer be read as before is refused, until kinesisgen -lock accepts it.
// -asyncapi FILE also writes the AsyncAPI 3 document of the packages.
// With -check it writes nothing at all and exits 1 naming every generated
// file that is missing, out of date (with a unified diff) or stale, and
// every breaking change, for CI.
// kinesisgen -help prints the exit codes, how method receivers become Mount
// parameters, and the marker reference.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kinesisgen/kinesisgen/annotations"
	"github.com/kinesisgen/kinesisgen/internal/gen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code: 0 done, 1 problems in
// the packages or stale files under -check, 2 bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("kinesisgen", flag.ContinueOnError)
	fl.SetOutput(stderr)
	check := fl.Bool("check", false, "write nothing; exit 1 naming generated files and locks that are missing, out of date (with a unified diff) or stale, and every breaking change")
	verbose := fl.Bool("v", false, "print the files written and the time spent")
	lock := fl.Bool("lock", false, "rewrite each package's kinesis.lock.json from the code, accepting the breaking changes it lists (see contracts below)")
	asyncapi := fl.String("asyncapi", "", "also write the AsyncAPI 3 `FILE` of the packages: JSON when it ends in .json, YAML otherwise; with -check, compare it")
	usage := func(w io.Writer) {
		fl.SetOutput(w)
		fmt.Fprintf(w, "usage: kinesisgen [-check] [-lock] [-asyncapi FILE] [-v] [packages]\n\nflags:\n")
		fl.PrintDefaults()
		fmt.Fprint(w, usageNotes)
		fmt.Fprintf(w, "\n%s", annotations.Help())
	}
	fl.Usage = func() {} // printed below: the reference to stdout on -help
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "run kinesisgen -help for the usage and the marker reference\n")
		return 2
	}
	if *check && *lock {
		fmt.Fprintf(stderr, "kinesisgen: -check writes nothing, so it cannot -lock\n")
		return 2
	}
	cfg := gen.Config{AsyncAPI: *asyncapi}
	if *lock {
		cfg.Lock = gen.LockAccept
	}
	res, err := gen.Generate(cfg, fl.Args()...)
	if err != nil {
		fmt.Fprintf(stderr, "kinesisgen: %v\n", err)
		return 1
	}
	if len(res.Diagnostics) > 0 {
		for _, d := range res.Diagnostics {
			fmt.Fprintln(stderr, d)
		}
		return 1
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, w)
	}
	if *asyncapi == "" {
		// A package's //go:generate line may ask for an AsyncAPI document:
		// a run over several packages writes (or checks) it where go
		// generate would, relative to that package.
		docs, problems := directiveDocs(res, cfg)
		if len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(stderr, p)
			}
			return 1
		}
		res.Contracts = append(res.Contracts, docs...)
	}
	wd, _ := os.Getwd()
	rel := func(p string) string {
		if r, err := filepath.Rel(wd, p); err == nil {
			return r
		}
		return p
	}
	if *check {
		return checkFiles(res, rel, stderr)
	}
	if len(res.Accepted) > 0 {
		fmt.Fprintf(stderr, "kinesisgen: -lock accepted %d breaking change(s); review the kinesis.lock.json diff:\n", len(res.Accepted))
		for _, d := range res.Accepted {
			fmt.Fprintf(stderr, "  %s\n", d)
		}
	}
	status := 0
	for _, f := range slices.Concat(res.Files, res.Contracts) {
		if old, err := os.ReadFile(f.Path); err == nil && bytes.Equal(gen.LF(old), f.Content) {
			continue // unchanged (a CRLF checkout's too): keep it and its modification time
		}
		if err := os.WriteFile(f.Path, f.Content, 0o644); err != nil {
			fmt.Fprintf(stderr, "kinesisgen: %v\n", err)
			status = 1
			continue
		}
		if *verbose {
			fmt.Fprintf(stdout, "wrote %s\n", rel(f.Path))
		}
	}
	for _, p := range res.Remove {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "kinesisgen: %v\n", err)
			status = 1
			continue
		}
		if *verbose {
			fmt.Fprintf(stdout, "removed %s (no marker left)\n", rel(p))
		}
	}
	if *verbose {
		fmt.Fprintf(stdout, "%d files in %v (loading packages %v)\n", len(res.Files)+len(res.Contracts), res.Total.Round(1e6), res.Load.Round(1e6))
	}
	return status
}

// checkFiles compares what would be written with what is on disk.
func checkFiles(res *gen.Result, rel func(string) string, stderr io.Writer) int {
	status := 0
	for _, f := range slices.Concat(res.Files, res.Contracts) {
		old, err := os.ReadFile(f.Path)
		old = gen.LF(old) // a CRLF checkout of an up-to-date file is up to date
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(stderr, "%s: missing; run go generate\n", rel(f.Path))
			status = 1
		case err != nil:
			fmt.Fprintf(stderr, "kinesisgen: %v\n", err)
			status = 1
		case !bytes.Equal(old, f.Content):
			// A lock (or document) also describes the messages of other
			// packages its subscribers read: a change there makes it stale,
			// and go generate in that package alone does not mend it.
			fix := "go generate"
			if !strings.HasSuffix(f.Path, gen.FileName) {
				fix = "go generate ./..."
			}
			fmt.Fprintf(stderr, "%s: out of date; run %s\n", rel(f.Path), fix)
			name := rel(f.Path)
			fmt.Fprint(stderr, unifiedDiff(name+" (on disk)", name+" (generated)", old, f.Content))
			status = 1
		}
	}
	for _, p := range res.Remove {
		fmt.Fprintf(stderr, "%s: stale, no //kinesis: marker left in its package; run go generate to remove it\n", rel(p))
		status = 1
	}
	return status
}
