package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A Go block in a guide is one of:
//
//	```go                      a whole file (package clause, imports): compiled as is
//	```go fragment             declarations, or statements, of an application
//	```go fragment module=bench    the same, with the bench module's dependencies
//	                              (the OpenTelemetry SDK is not in the framework's go.mod)
//
// A fragment gets its imports from the package names it uses (knownImports)
// and, when it is statements, runs in a function where ctx, t, b and awsCfg
// are declared. The fragments of one Markdown file (and module) are one
// package, so a later fragment may use what an earlier one declares. The package orders of the guides' first app is the stub
// ordersStub. In fragments, unused variables and imports are not errors:
// a fragment shows a step, not a program.

var knownImports = map[string]string{
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"http":          "net/http",
	"log":           "log",
	"os":            "os",
	"slog":          "log/slog",
	"sql":           "database/sql",
	"statuspage":    "github.com/kinesisgen/kinesisgen/runtime/statuspage",
	"testing":       "testing",
	"time":          "time",
	"aws":           "github.com/aws/aws-sdk-go-v2/aws",
	"config":        "github.com/aws/aws-sdk-go-v2/config",
	"dynamodb":      "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"kinesis":       "github.com/aws/aws-sdk-go-v2/service/kinesis",
	"runtime":       "github.com/kinesisgen/kinesisgen/runtime",
	"lease":         "github.com/kinesisgen/kinesisgen/runtime/lease",
	"lambda":        "github.com/aws/aws-lambda-go/lambda",
	"kinesislambda": "github.com/kinesisgen/kinesisgen/runtime/kinesislambda",
	"kinesistest":   "github.com/kinesisgen/kinesisgen/runtime/kinesistest",
	"kinesismock":   "github.com/kinesisgen/kinesisgen/runtime/kinesistest/kinesismock",
	"orders":        ordersPath,
	"sdktrace":      "go.opentelemetry.io/otel/sdk/trace",
	"sdkmetric":     "go.opentelemetry.io/otel/sdk/metric",
}

const ordersPath = "example.com/app/orders"

// ordersStub is the guides' first app with what go generate adds to it.
const ordersStub = `package orders

import (
	"context"
	"database/sql"

	"github.com/kinesisgen/kinesisgen/runtime"
)

type Order struct {
	ID       int    ` + "`json:\"id\"`" + `
	Customer string ` + "`json:\"customer\"`" + `
}

type Entry struct {
	Order    int    ` + "`json:\"order\"`" + `
	Customer string ` + "`json:\"customer\"`" + `
}

type Receipt struct{ Order int }

type Service struct{ DB *sql.DB }

func (s *Service) Confirm(ctx context.Context, entry Entry) Receipt { return Receipt{Order: entry.Order} }

func NewOrderPublisher(b *runtime.Broker, opts ...runtime.PublishOption) runtime.Publisher[Order] { return nil }
func NewEntryPublisher(b *runtime.Broker, opts ...runtime.PublishOption) runtime.Publisher[Entry] { return nil }
func Mount(b *runtime.Broker, service ...*Service) error { return nil }
`

type snippet struct {
	file     string
	line     int
	fragment bool
	module   string // "" or "bench"
	src      string
}

// snippets returns every Go block of README.md and docs/*.md.
func snippets(t *testing.T) []snippet {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var out []snippet
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		var cur *snippet
		var body strings.Builder
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			trimmed := strings.TrimSpace(line)
			if cur == nil {
				if !strings.HasPrefix(trimmed, "```") {
					continue
				}
				info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
				if len(info) == 0 || info[0] != "go" {
					if len(info) > 0 && strings.EqualFold(info[0], "golang") {
						t.Errorf("%s:%d: write ```go, not ```%s", f, n, info[0])
					}
					// Skip this non-Go block to its end.
					for sc.Scan() {
						n++
						if strings.HasPrefix(strings.TrimSpace(sc.Text()), "```") {
							break
						}
					}
					continue
				}
				cur = &snippet{file: f, line: n + 1}
				for _, w := range info[1:] {
					switch {
					case w == "fragment":
						cur.fragment = true
					case w == "module=bench":
						cur.module = "bench"
					default:
						t.Errorf("%s:%d: unknown word %q in the fence (want go, go fragment, go fragment module=bench)", f, n, w)
					}
				}
				body.Reset()
				continue
			}
			if strings.HasPrefix(trimmed, "```") {
				cur.src = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
		}
		if cur != nil {
			t.Errorf("%s:%d: Go block never closed", f, cur.line)
		}
	}
	return out
}

// wrap turns a snippet into a file to type-check.
func wrap(s snippet) (string, error) {
	if !s.fragment {
		return s.src, nil
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	// Declarations first; if they do not parse, statements.
	asDecls := "package snippet\n" + s.src
	f, err := parser.ParseFile(fset, "", asDecls, parser.SkipObjectResolution)
	body := s.src
	stmts := err != nil
	if stmts {
		body = "func _() error {\n\tvar (\n\t\tctx    context.Context\n\t\tt      *testing.T\n\t\tb      *runtime.Broker\n\t\tawsCfg aws.Config\n\t)\n\t_, _, _, _ = ctx, t, b, awsCfg\n\t{\n" + s.src + "\n\t}\n\treturn nil\n}\n"
		used["context"], used["testing"], used["runtime"], used["aws"] = true, true, true, true
		f, err = parser.ParseFile(fset, "", "package snippet\n"+body, parser.SkipObjectResolution)
		if err != nil {
			return "", fmt.Errorf("neither declarations nor statements: %v", err)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				if _, known := knownImports[id.Name]; known {
					used[id.Name] = true
				}
			}
		}
		return true
	})
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	var src strings.Builder
	src.WriteString("package snippet\n\nimport (\n")
	for _, n := range names {
		fmt.Fprintf(&src, "\t%s %q\n", n, knownImports[n])
	}
	src.WriteString(")\n\n")
	src.WriteString(body)
	return src.String(), nil
}

// exports lists the export data of the packages the snippets import, with
// their dependencies, as built by the go command in dir's module.
func exports(t *testing.T, dir string, paths []string) map[string]string {
	args := append([]string{"list", "-e", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		if file != "" {
			m[path] = file
		}
	}
	return m
}

type stubImporter struct {
	gc    types.Importer
	stubs map[string]*types.Package
}

func (s stubImporter) Import(path string) (*types.Package, error) {
	if p, ok := s.stubs[path]; ok {
		return p, nil
	}
	return s.gc.Import(path)
}

func TestGoSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the export data of the runtime's dependencies")
	}
	all := snippets(t)
	if len(all) == 0 {
		t.Fatal("no Go snippets found")
	}
	type prepared struct {
		snippet
		file *ast.File
		fset *token.FileSet
	}
	byModule := map[string][]prepared{}
	paths := map[string]map[string]bool{}
	for _, s := range all {
		src, err := wrap(s)
		if err != nil {
			t.Errorf("%s:%d: %v", s.file, s.line, err)
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, fmt.Sprintf("%s:%d", s.file, s.line), src, parser.ParseComments)
		if err != nil {
			t.Errorf("%s:%d: %v\n%s", s.file, s.line, err, src)
			continue
		}
		if paths[s.module] == nil {
			paths[s.module] = map[string]bool{"github.com/kinesisgen/kinesisgen/runtime": true, "database/sql": true, "context": true}
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if p != ordersPath {
				paths[s.module][p] = true
			}
		}
		byModule[s.module] = append(byModule[s.module], prepared{s, f, fset})
	}
	for module, snips := range byModule {
		dir := ".."
		if module != "" {
			dir = filepath.Join("..", module)
		}
		var list []string
		for p := range paths[module] {
			list = append(list, p)
		}
		sort.Strings(list)
		exp := exports(t, dir, list)
		fset := token.NewFileSet()
		gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			file, ok := exp[path]
			if !ok {
				return nil, fmt.Errorf("no export data for %q (is it in the module's go.mod?)", path)
			}
			return os.Open(file)
		})
		imp := stubImporter{gc: gc, stubs: map[string]*types.Package{}}
		stubFile, err := parser.ParseFile(fset, "orders_stub.go", ordersStub, 0)
		if err != nil {
			t.Fatal(err)
		}
		stub, err := (&types.Config{Importer: imp}).Check(ordersPath, fset, []*ast.File{stubFile}, nil)
		if err != nil {
			t.Fatalf("the orders stub: %v", err)
		}
		imp.stubs[ordersPath] = stub
		// Whole files alone; the fragments of one Markdown file together.
		var groups [][]prepared
		frags := map[string]int{}
		for _, s := range snips {
			if !s.fragment {
				groups = append(groups, []prepared{s})
				continue
			}
			i, ok := frags[s.snippet.file]
			if !ok {
				i = len(groups)
				frags[s.snippet.file] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], s)
		}
		for _, g := range groups {
			var errs []string
			var files []*ast.File
			gfset := token.NewFileSet()
			for _, s := range g {
				// Re-parse into one FileSet, as the checker needs for a package.
				src, _ := wrap(s.snippet)
				f, err := parser.ParseFile(gfset, fmt.Sprintf("%s:%d", s.snippet.file, s.line), src, parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			fragment := g[0].fragment
			conf := types.Config{Importer: imp, Error: func(err error) {
				msg := err.Error()
				if fragment && (strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used")) {
					return
				}
				errs = append(errs, msg)
			}}
			conf.Check("snippet", gfset, files, nil)
			if len(errs) > 0 {
				var blocks []string
				for _, s := range g {
					blocks = append(blocks, fmt.Sprintf("--- %s:%d ---\n%s", s.snippet.file, s.line, s.src))
				}
				t.Errorf("Go blocks that do not compile (positions are in the wrapped source: the block's line %d is line 1 of a whole file, of a fragment about line 3 of declarations or 10 of statements):\n\t%s\n%s",
					g[0].line, strings.Join(errs, "\n\t"), strings.Join(blocks, "\n"))
			}
		}
		t.Logf("module %q: %d snippets type-checked", module, len(snips))
	}
}
