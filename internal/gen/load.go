package gen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"

	kcontract "github.com/kinesisgen/kinesisgen/internal/contract"
)

type loadResult struct {
	pkgs []*loadedPkg
	took time.Duration
}

// loadedPkg is one package with its errors sorted out by kind.
type loadedPkg struct {
	*packages.Package
	genPath    string // absolute path of its kinesis_gen.go
	ownGenFile bool   // kinesis_gen.go exists and carries Header
	userGen    bool   // kinesis_gen.go exists without Header: the user's file
	typeErrs   []types.Error
	otherErrs  []packages.Error
	constraint constraints // why only some builds compile a file, by name
}

const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo

func load(dir string, env []string, patterns []string) (*loadResult, error) {
	start := time.Now()
	cfg := &packages.Config{
		Mode: loadMode,
		Dir:  dir,
		Env:  env,
		// An existing generated file is read as its package clause only, so
		// neither its stale contents nor its absence changes what the rest of
		// the package means.
		ParseFile: func(fset *token.FileSet, filename string, src []byte) (*ast.File, error) {
			mode := parser.AllErrors | parser.ParseComments
			if filepath.Base(filename) == FileName && isGenerated(src) {
				mode = parser.PackageClauseOnly | parser.ParseComments
			}
			return parser.ParseFile(fset, filename, src, mode)
		},
	}
	targets := patterns
	if slices.ContainsFunc(patterns, func(p string) bool { return strings.Contains(p, "...") }) {
		// A wildcard may match a whole repository: type-check only the
		// packages that kinesisgen has something to do with.
		var err error
		if targets, err = prefilter(dir, env, patterns); err != nil {
			return nil, err
		}
		if len(targets) == 0 {
			return &loadResult{took: time.Since(start)}, nil
		}
	}
	pkgs, err := packages.Load(cfg, targets...)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		// Outside a module go list can fail without a package to hang it on.
		return nil, fmt.Errorf("%s matched no packages (is %s inside a Go module?)", strings.Join(patterns, " "), dir)
	}
	res := &loadResult{took: time.Since(start)}
	for _, p := range pkgs {
		lp := &loadedPkg{Package: p, typeErrs: p.TypeErrors, constraint: constraints{}}
		if len(p.GoFiles) > 0 {
			lp.genPath = filepath.Join(filepath.Dir(p.GoFiles[0]), FileName)
		} else if p.Dir != "" {
			lp.genPath = filepath.Join(p.Dir, FileName)
		}
		if lp.genPath != "" {
			if src, err := os.ReadFile(lp.genPath); err == nil {
				lp.ownGenFile = isGenerated(src)
				lp.userGen = !lp.ownGenFile
			}
		}
		for _, e := range p.Errors {
			switch {
			case e.Kind == packages.TypeError:
				// Kept as p.TypeErrors, with structured positions.
			case strings.Contains(e.Msg, "build constraints exclude all Go files"):
				// Nothing of the package is compiled in this configuration;
				// the markers of its files are reported from source.
			case e.Kind == packages.ListError && strings.HasPrefix(e.Msg, "# "+p.PkgPath+"\n"):
				// The compiler's view of this package while building export
				// data: it saw the stale or missing kinesis_gen.go. The type
				// check from source above is the authoritative copy.
			default:
				lp.otherErrs = append(lp.otherErrs, e)
			}
		}
		res.pkgs = append(res.pkgs, lp)
	}
	return res, nil
}

// relevantRE finds what makes a package kinesisgen's business: a marker (or
// a mistyped one) at the start of a comment line, or a kinesis field tag.
var relevantRE = regexp.MustCompile(`(?m)^\s*//\s*kinesis:|kinesis:"`)

// prefilter lists the packages matching patterns without parsing them and
// returns the import paths of those with a marker, a kinesis tag, a
// generated kinesis_gen.go or a listing error (reported by the full load).
func prefilter(dir string, env []string, patterns []string) ([]string, error) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles, Dir: dir, Env: env}, patterns...)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		if excluded := excludedPackages(dir, patterns, nil); len(excluded) > 0 {
			return excluded, nil
		}
		return nil, fmt.Errorf("%s matched no packages (is %s inside a Go module?)", strings.Join(patterns, " "), dir)
	}
	var paths []string
	for _, p := range pkgs {
		var tests []string
		if len(p.GoFiles) > 0 {
			tests, _ = filepath.Glob(filepath.Join(filepath.Dir(p.GoFiles[0]), "*_test.go"))
		} else if p.Dir != "" {
			tests, _ = filepath.Glob(filepath.Join(p.Dir, "*_test.go"))
		}
		if len(p.Errors) > 0 || hasLock(p.GoFiles) || slices.ContainsFunc(slices.Concat(p.GoFiles, p.IgnoredFiles, tests), func(name string) bool {
			src, err := os.ReadFile(name)
			if err != nil {
				return true // let the full load report it
			}
			return relevantRE.Match(src) || (filepath.Base(name) == FileName && isGenerated(src))
		}) {
			paths = append(paths, p.PkgPath)
		}
	}
	return append(paths, excludedPackages(dir, patterns, pkgs)...), nil
}

// excludedPackages returns, as directory patterns, the package directories
// below the relative wildcard patterns that go list leaves out because this
// configuration compiles none of their files, when one of those files has
// a marker or a kinesis tag: another configuration would see them, so this
// one reports them too (see checkIgnoredFiles).
func excludedPackages(dir string, patterns []string, listed []*packages.Package) []string {
	seen := map[string]bool{}
	for _, p := range listed {
		for _, f := range slices.Concat(p.GoFiles, p.IgnoredFiles, p.OtherFiles) {
			seen[filepath.Dir(f)] = true
		}
	}
	var out []string
	for _, pat := range patterns {
		root, ok := strings.CutSuffix(pat, "...")
		if !ok || !(root == "" || strings.HasPrefix(root, "./") || strings.HasPrefix(root, "../") || filepath.IsAbs(root)) {
			continue // an import path pattern: what go list saw is all
		}
		root = filepath.Join(dir, strings.TrimSuffix(root, "/"))
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			if seen[path] {
				return nil
			}
			files, _ := filepath.Glob(filepath.Join(path, "*.go"))
			if slices.ContainsFunc(files, func(f string) bool {
				if strings.HasSuffix(f, "_test.go") {
					return false
				}
				src, err := os.ReadFile(f)
				return err == nil && relevantRE.Match(src)
			}) {
				if rel, err := filepath.Rel(dir, path); err == nil {
					out = append(out, "./"+filepath.ToSlash(rel))
				}
			}
			return nil
		})
	}
	return out
}

// hasLock reports whether the package of files keeps a contract lock: its
// markers may be gone, but the lock still speaks for its streams.
func hasLock(files []string) bool {
	if len(files) == 0 {
		return false
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(files[0]), kcontract.LockFile))
	return err == nil
}

// isGenerated reports whether src starts with Header on its own line; a
// checkout with CRLF line ends (core.autocrlf) keeps the file kinesisgen's.
func isGenerated(src []byte) bool {
	return bytes.HasPrefix(src, []byte(Header+"\n")) || bytes.HasPrefix(src, []byte(Header+"\r\n"))
}

// LF returns src with its CRLF line ends made LF: what kinesisgen reads
// back from disk is compared as text, so that a CRLF checkout of an
// unchanged file is up to date.
func LF(src []byte) []byte {
	if !bytes.Contains(src, []byte("\r\n")) {
		return src
	}
	return bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
}

// The go/types messages that a missing generated file causes, with the
// package qualifier when the name belongs to another package of the run.
var (
	undefinedRE     = regexp.MustCompile(`^undefined: (?:(\w+)\.)?(\w+)$`)
	noMethodRE      = regexp.MustCompile(`\(type \*?(?:(\w+)\.)?(\w+) has no field or method (?:EncodeHeaders|DecodeHeaders)\)$`)
	missingMethodRE = regexp.MustCompile(`\*?(?:(\w+)\.)?(\w+) does not implement .*\(missing method (?:EncodeHeaders|DecodeHeaders)\)$`)
)

// suspect reads a type error that a missing generated file would cause: it
// returns the path of the package whose generated name it is about, the
// name, and whether the name is a header contract missing its methods.
func (p *loadedPkg) suspect(e types.Error) (path, name string, contract, ok bool) {
	if s := undefinedRE.FindStringSubmatch(e.Msg); s != nil {
		path = p.PkgPath
		if s[1] != "" {
			path = p.importAt(e.Pos)
		}
		return path, s[2], false, path != ""
	}
	for _, re := range []*regexp.Regexp{noMethodRE, missingMethodRE} {
		if s := re.FindStringSubmatch(e.Msg); s != nil {
			path = p.PkgPath
			if s[1] != "" {
				path = p.importNamed(s[1])
			}
			return path, s[2], true, path != ""
		}
	}
	return "", "", false, false
}

// forgiven reports whether a type error is one that generating removes: an
// undefined generated name, or a header contract without its methods, of
// this package or of another whose outline is known.
func (p *loadedPkg) forgiven(e types.Error, outlines map[string]*outline) bool {
	path, name, contract, ok := p.suspect(e)
	if !ok || outlines[path] == nil {
		return false
	}
	if contract {
		return outlines[path].contracts[name]
	}
	return outlines[path].names[name]
}

// importAt returns the path of the package that the selector whose name is
// at pos (pkg.Name) refers to, or "".
func (p *loadedPkg) importAt(pos token.Pos) string {
	for _, f := range p.Syntax {
		if f.FileStart > pos || pos > f.FileEnd {
			continue
		}
		var path string
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || path != "" {
				return path == ""
			}
			if id, ok := sel.X.(*ast.Ident); ok && sel.Sel.Pos() == pos {
				if pn, ok := p.TypesInfo.Uses[id].(*types.PkgName); ok {
					path = pn.Imported().Path()
				}
			}
			return true
		})
		return path
	}
	return ""
}

// importNamed returns the path of the package imported by p whose name is
// name, when exactly one is.
func (p *loadedPkg) importNamed(name string) string {
	path := ""
	for _, imp := range p.Types.Imports() {
		if imp.Name() == name {
			if path != "" {
				return ""
			}
			path = imp.Path()
		}
	}
	return path
}

// report adds the package's load errors to diags, less those that the
// generated files will fix.
func (p *loadedPkg) report(outlines map[string]*outline, diags *diagnostics) {
	for _, e := range p.otherErrs {
		diags.add(parsePos(e.Pos, p), "%s", e.Msg)
	}
	var fromCgo map[string]bool
	for _, e := range p.typeErrs {
		if s := undefinedRE.FindStringSubmatch(e.Msg); s != nil && s[1] == "" {
			if fromCgo == nil {
				fromCgo = cgoNames(p)
			}
			if fromCgo[s[2]] {
				continue // declared in a cgo file, which cgo builds compile
			}
		}
		if !p.forgiven(e, outlines) && !cgoImportError(e.Msg) {
			diags.add(e.Fset.Position(e.Pos), "%s", e.Msg)
		}
	}
}

// parsePos reads the "file:line:col" of a packages.Error.
func parsePos(s string, p *loadedPkg) token.Position {
	if s == "" || s == "-" {
		name := p.Dir
		if name == "" {
			name = p.PkgPath
		}
		return token.Position{Filename: name}
	}
	parts := strings.Split(s, ":")
	var pos token.Position
	nums := []int{}
	for len(parts) > 1 && len(nums) < 2 {
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			break
		}
		nums = append([]int{n}, nums...)
		parts = parts[:len(parts)-1]
	}
	pos.Filename = strings.Join(parts, ":")
	if len(nums) > 0 {
		pos.Line = nums[0]
	}
	if len(nums) > 1 {
		pos.Column = nums[1]
	}
	return pos
}
