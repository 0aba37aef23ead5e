package gen

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
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
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	res := &loadResult{took: time.Since(start)}
	for _, p := range pkgs {
		lp := &loadedPkg{Package: p, typeErrs: p.TypeErrors}
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

func isGenerated(src []byte) bool {
	return bytes.HasPrefix(src, []byte(Header+"\n"))
}

// The go/types messages that a missing generated file causes.
var (
	undefinedRE     = regexp.MustCompile(`^undefined: (\w+)$`)
	noMethodRE      = regexp.MustCompile(`\(type \*?(\w+) has no field or method (EncodeHeaders|DecodeHeaders)\)$`)
	missingMethodRE = regexp.MustCompile(`\*?(\w+) does not implement .*\(missing method (EncodeHeaders|DecodeHeaders)\)$`)
)

// forgiven reports whether a type error is one that this run's output for
// the package removes: an undefined generated name, or a header method of a
// header contract.
func (m *pkgModel) forgiven(msg string) bool {
	if s := undefinedRE.FindStringSubmatch(msg); s != nil {
		return m.generates(s[1])
	}
	for _, re := range []*regexp.Regexp{noMethodRE, missingMethodRE} {
		if s := re.FindStringSubmatch(msg); s != nil {
			return m.contract(s[1]) != nil
		}
	}
	return false
}

// forgiveAndReport adds the package's load errors to diags, less those that
// the generated file will fix.
func (p *loadedPkg) forgiveAndReport(m *pkgModel, diags *diagnostics) {
	for _, e := range p.otherErrs {
		diags.add(parsePos(e.Pos, p), "%s", e.Msg)
	}
	for _, e := range p.typeErrs {
		if m != nil && m.forgiven(e.Msg) {
			continue
		}
		diags.add(e.Fset.Position(e.Pos), "%s", e.Msg)
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
