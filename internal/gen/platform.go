package gen

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// kinesis_gen.go is one file for every GOOS, GOARCH, build tag and cgo
// setting: it carries no build constraint, and a run's result may not
// depend on the configuration it runs under. So markers and kinesis tags are
// refused in files that only some builds compile (a //go:build line, a
// _GOOS or _GOARCH file name, an import of "C"), under every configuration
// alike: those compiled in this one are checked as they are collected, the
// others (the package's IgnoredFiles) are read from source. Packages load
// with cgo on when a C compiler is there, whatever CGO_ENABLED says, so a
// package's portable files that use its cgo files type-check the same
// everywhere; without one, the names those files would have from the cgo
// files are forgiven (see cgoNames).

// loaderEnv is env (nil: the process's) with cgo on when the go command
// has it off but can find its C compiler. Forcing cgo on without a C
// compiler would fail to build the export data of every package that
// depends on runtime/cgo (net, os/user), so then it stays off.
func loaderEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	cmd := exec.Command("go", "env", "CGO_ENABLED", "CC")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return env // the load reports what is wrong with the go command
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] == "1" {
		return env
	}
	cc := strings.Fields(lines[1])
	if len(cc) == 0 {
		return env
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return env
	}
	return append(slices.Clip(env), "CGO_ENABLED=1")
}

// cgoImportError reports whether msg is go/types failing to import "C",
// which happens when cgo is on but cannot run; kinesisgen never needs C's
// names.
func cgoImportError(msg string) bool { return strings.HasPrefix(msg, "could not import C (") }

// cgoNames returns the package-level names declared in the package's cgo
// files that this configuration does not compile (cgo off): the uses of
// them in its other files are not errors of the package.
func cgoNames(p *loadedPkg) map[string]bool {
	names := map[string]bool{}
	for _, name := range p.IgnoredFiles {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil || f.Name.Name != p.Name || !slices.ContainsFunc(f.Imports, func(s *ast.ImportSpec) bool { return s.Path.Value == `"C"` }) {
			continue
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// constraintOf says why only some builds compile the file named filename
// with source src, or "" when every build does.
func constraintOf(filename string, src []byte) string {
	f, err := parser.ParseFile(token.NewFileSet(), filename, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return ""
	}
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) || constraint.IsPlusBuild(c.Text) {
				return "a file that only some builds compile (" + c.Text + ")"
			}
		}
	}
	if part := platformSuffix(filepath.Base(filename)); part != "" {
		return "a file that only some builds compile (its name ends in " + part + ")"
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "C" {
			return `a file that imports "C", which only cgo builds compile`
		}
	}
	return ""
}

// platformSuffix returns the _GOOS, _GOARCH or _GOOS_GOARCH that ends the
// file name (before .go and _test), as go/build reads it, or "".
func platformSuffix(name string) string {
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".go"), "_test")
	parts := strings.Split(name, "_")
	if len(parts) < 2 {
		return ""
	}
	n := len(parts)
	if n >= 3 && knownOS[parts[n-2]] && knownArch[parts[n-1]] {
		return "_" + parts[n-2] + "_" + parts[n-1]
	}
	if knownOS[parts[n-1]] || knownArch[parts[n-1]] {
		return "_" + parts[n-1]
	}
	return ""
}

// constraints caches constraintOf by file name for one run.
type constraints map[string]string

func (c constraints) of(filename string) string {
	if why, ok := c[filename]; ok {
		return why
	}
	src, err := os.ReadFile(filename)
	why := ""
	if err == nil {
		why = constraintOf(filename, src)
	}
	c[filename] = why
	return why
}

// constrainedMarker reports a marker in a file that only some builds compile.
func constrainedMarker(diags *diagnostics, mk annotations.Marker, why string) {
	hint := ""
	if mk.MarkerName() == "subscriber" {
		hint = " (it may call platform-specific code)"
	}
	diags.add(mk.Position(), "%s%s in %s; kinesis_gen.go is the same file for every build, so put the declaration in a file that every build compiles%s", annotations.Prefix, mk.MarkerName(), why, hint)
}

// constrainedTag reports a kinesis-tagged field in such a file.
func constrainedTag(diags *diagnostics, pos token.Position, field, typ, why string) {
	diags.add(pos, "kinesis tag on field %s of %s in %s; kinesis_gen.go is the same file for every build, so put the header contract in a file that every build compiles", field, typ, why)
}

// checkIgnoredFiles reports the markers and kinesis tags of the package's
// files that this configuration does not compile; every configuration
// reports them, from source.
func checkIgnoredFiles(p *loadedPkg, diags *diagnostics) {
	for _, name := range p.IgnoredFiles {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil || !relevantRE.Match(src) {
			continue
		}
		why := constraintOf(name, src)
		if why == "" {
			why = "a file that this build does not compile"
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue // the builds that compile it report it
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				mk, ds := annotations.ParseComment(fset.Position(c.Slash), c.Text)
				diags.addAll(ds)
				if mk != nil {
					constrainedMarker(diags, mk, why)
				}
			}
		}
		forEachTag(fset, f, func(pos token.Position, field, typ string) { constrainedTag(diags, pos, field, typ, why) })
	}
}

// checkTestFiles reports the markers of the package's _test.go files:
// kinesis_gen.go is compiled without them, so it cannot declare what they
// ask for. A mistyped marker is reported as in any other file.
func checkTestFiles(p *loadedPkg, diags *diagnostics) {
	for _, name := range testFiles(p) {
		src, err := os.ReadFile(name)
		if err != nil || !relevantRE.Match(src) {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue // go test reports it
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				mk, ds := annotations.ParseComment(fset.Position(c.Slash), c.Text)
				diags.addAll(ds)
				if mk != nil {
					diags.add(mk.Position(), "%s%s in a _test.go file: kinesisgen generates only for the files go build compiles; declare it in a non-test file of the package, or publish and subscribe in the test with runtime.NewPublisher and runtime.Subscribe", annotations.Prefix, mk.MarkerName())
				}
			}
		}
	}
}

// testFiles lists the _test.go files beside the package's files, whatever
// their build constraints.
func testFiles(p *loadedPkg) []string {
	if p.genPath == "" {
		return nil
	}
	names, _ := filepath.Glob(filepath.Join(filepath.Dir(p.genPath), "*_test.go"))
	return slices.DeleteFunc(names, func(n string) bool {
		b := filepath.Base(n)
		return strings.HasPrefix(b, ".") || strings.HasPrefix(b, "_")
	})
}

// forEachTag calls fn for each kinesis-tagged field of the struct types of f.
func forEachTag(fset *token.FileSet, f *ast.File, fn func(pos token.Position, field, typ string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fld := range st.Fields.List {
			tag, err := "", error(nil)
			if fld.Tag != nil {
				tag, err = strconv.Unquote(fld.Tag.Value)
			}
			if err != nil || tag == "" {
				continue
			}
			if _, tagged, _ := annotations.HeaderTag(tag); tagged {
				name := "(embedded)"
				if len(fld.Names) > 0 {
					name = fld.Names[0].Name
				}
				fn(fset.Position(fld.Pos()), name, ts.Name.Name)
			}
		}
		return true
	})
}

// The GOOS and GOARCH values that go/build reads in file names (its syslist).
var (
	knownOS = set("aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js", "linux", "nacl",
		"netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos")
	knownArch = set("386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips", "mipsle", "mips64",
		"mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le", "riscv", "riscv64", "s390", "s390x", "sparc",
		"sparc64", "wasm")
)

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}
