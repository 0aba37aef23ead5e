package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kinesisgen/kinesisgen/internal/gen"
)

// asyncAPIRun is what one //go:generate line that runs kinesisgen with
// -asyncapi asks for: the document at file (in dir unless absolute), of
// the packages patterns name in dir ("." when none).
type asyncAPIRun struct {
	dir, file string
	patterns  []string
}

// asyncAPIDirectives finds, in the directories of res's generated files,
// the //go:generate lines that run kinesisgen with -asyncapi FILE, so that
// a run over ./... from the module root (go generate's work done at once,
// or -check in CI) resolves FILE where go generate would: in the
// directory of the file holding the line.
func asyncAPIDirectives(res *gen.Result) []asyncAPIRun {
	var dirs []string
	for _, f := range slices.Concat(res.Files, res.Contracts) {
		if d := filepath.Dir(f.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	var runs []asyncAPIRun
	for _, dir := range dirs {
		names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil || !bytes.Contains(src, []byte("-asyncapi")) {
				continue
			}
			sc := bufio.NewScanner(bytes.NewReader(src))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if r, ok := parseDirective(sc.Text(), dir); ok && !slices.ContainsFunc(runs, func(o asyncAPIRun) bool {
					return o.dir == r.dir && o.file == r.file
				}) {
					runs = append(runs, r)
				}
			}
		}
	}
	return runs
}

// parseDirective reads a //go:generate line that runs kinesisgen (go tool
// kinesisgen, go run .../cmd/kinesisgen, or kinesisgen) with -asyncapi.
func parseDirective(line, dir string) (asyncAPIRun, bool) {
	rest, ok := strings.CutPrefix(line, "//go:generate ")
	if !ok {
		return asyncAPIRun{}, false
	}
	words := splitWords(rest)
	at := slices.IndexFunc(words, func(w string) bool {
		return w == "kinesisgen" || strings.HasSuffix(w, "/kinesisgen") || strings.HasSuffix(w, "/cmd/kinesisgen@latest")
	})
	if at < 0 {
		return asyncAPIRun{}, false
	}
	r := asyncAPIRun{dir: dir}
	args := words[at+1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-asyncapi" || a == "--asyncapi":
			if i+1 < len(args) {
				r.file = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-asyncapi=") || strings.HasPrefix(a, "--asyncapi="):
			r.file = a[strings.IndexByte(a, '=')+1:]
		case strings.HasPrefix(a, "-"):
			// -v, -lock, -check: flags without a value.
		default:
			r.patterns = append(r.patterns, a)
		}
	}
	if r.file == "" {
		return asyncAPIRun{}, false
	}
	if !filepath.IsAbs(r.file) {
		r.file = filepath.Join(dir, r.file)
	}
	return r, true
}

// splitWords splits as go generate does: on spaces, a double-quoted
// string (Go syntax) being one word.
func splitWords(s string) []string {
	var words []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			if q, err := strconv.QuotedPrefix(s); err == nil {
				w, _ := strconv.Unquote(q)
				words = append(words, w)
				s = s[len(q):]
				continue
			}
		}
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			i = len(s)
		}
		words = append(words, s[:i])
		s = s[i:]
	}
	return words
}

// directiveDocs generates the AsyncAPI document of each //go:generate line
// of res's packages (see asyncAPIDirectives), as go generate would; the
// documents a run of the same file already made are skipped.
func directiveDocs(res *gen.Result, cfg gen.Config) ([]gen.File, []string) {
	var docs []gen.File
	var problems []string
	have := func(path string) bool {
		return slices.ContainsFunc(res.Contracts, func(f gen.File) bool { return f.Path == path })
	}
	for _, r := range asyncAPIDirectives(res) {
		if have(r.file) {
			continue
		}
		c := cfg
		c.Dir, c.AsyncAPI = r.dir, r.file
		patterns := r.patterns
		if len(patterns) == 0 {
			patterns = []string{"."}
		}
		sub, err := gen.Generate(c, patterns...)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, d := range sub.Diagnostics {
			problems = append(problems, d.String())
		}
		for _, f := range sub.Contracts {
			if f.Path == r.file {
				docs = append(docs, f)
			}
		}
	}
	return docs, problems
}
