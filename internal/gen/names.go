package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// The generated file's identifiers are all named here. An import name
// shares the file's scope with every package-level name of the package, in
// every file and build configuration, so it must differ from all of them; a
// parameter or local must not hide an import or package-level name the code
// in its scope refers to. So imports are named first, against the package's
// names and the file's own declarations, and locals then avoid both.

// stdImports are the packages the generated file may use besides those of
// the user's types, with the names they get when nothing is in the way.
var stdImports = []struct{ path, name string }{
	{"context", "context"}, {"errors", "errors"}, {"fmt", "fmt"}, {"strconv", "strconv"}, {"time", "time"}, {runtimePath, "runtime"},
}

// fileNames is what a package's generated file may not take, and the names
// it gives its imports.
type fileNames struct {
	reserved map[string]bool   // package-level names, generated declarations, import names
	imports  map[string]string // import path → name in the file
}

// names names the imports of the generated file on first use.
func (m *pkgModel) names() *fileNames {
	if m.fileNames != nil {
		return m.fileNames
	}
	taken := m.packageNames()
	for _, msg := range m.messages {
		taken[msg.publisherFunc] = true
	}
	taken["Mount"] = true
	fn := &fileNames{reserved: taken, imports: map[string]string{}}
	importName := func(path, base string) {
		name := base
		for i := 1; !importable(name) || taken[name]; i++ {
			name = base + "_"
			if i > 1 {
				name += strconv.Itoa(i)
			}
		}
		taken[name] = true
		fn.imports[path] = name
	}
	for _, imp := range stdImports {
		importName(imp.path, imp.name)
	}
	others := m.typePackages()
	for _, path := range slices.Sorted(maps.Keys(others)) {
		if _, std := fn.imports[path]; !std {
			importName(path, others[path])
		}
	}
	// A local named like a standard import that the file does not use is
	// harmless, but avoiding the names keeps the output stable.
	for _, imp := range stdImports {
		taken[imp.name] = true
	}
	m.fileNames = fn
	return fn
}

// importable reports whether name may name an import of the generated file:
// not a keyword, not a predeclared name (the file uses several), and not a
// name jen would rename behind our back.
func importable(name string) bool {
	return name != "init" && name != "_" && !token.IsKeyword(name) && types.Universe.Lookup(name) == nil && !jen.IsReservedWord(name)
}

// register tells f the name of each import.
func (fn *fileNames) register(f *jen.File) {
	std := map[string]string{}
	for _, imp := range stdImports {
		std[imp.path] = imp.name
	}
	for _, path := range slices.Sorted(maps.Keys(fn.imports)) {
		name := fn.imports[path]
		if std[path] == name {
			f.ImportName(path, name)
		} else {
			f.ImportAlias(path, name)
		}
	}
}

// typePackages returns the path and name of every package whose types the
// generated file refers to: handlers' messages and headers, and header
// fields of named types.
func (m *pkgModel) typePackages() map[string]string {
	pkgs := map[string]string{}
	var add func(t types.Type)
	add = func(t types.Type) {
		switch t := types.Unalias(t).(type) {
		case *types.Named:
			if p := t.Obj().Pkg(); p != nil && p != m.pkg.Types {
				pkgs[p.Path()] = p.Name()
			}
		case *types.Pointer:
			add(t.Elem())
		}
	}
	for _, h := range m.subs {
		add(h.msg)
		if h.headers != nil {
			add(h.headers)
		}
	}
	for _, c := range m.contracts {
		for _, hf := range c.fields {
			add(hf.typ)
		}
		// Embedded structs too, with their fields: what the file says of
		// a header reached through an embed may name their types.
		var walk func(t types.Type, seen map[types.Type]bool)
		walk = func(t types.Type, seen map[types.Type]bool) {
			if p, ok := types.Unalias(t).(*types.Pointer); ok {
				t = p.Elem()
			}
			st, ok := t.Underlying().(*types.Struct)
			if !ok || seen[t] {
				return
			}
			seen[t] = true
			for i := range st.NumFields() {
				if f := st.Field(i); f.Embedded() {
					add(f.Type())
					walk(f.Type(), seen)
				} else if _, tagged, _ := annotations.HeaderTag(st.Tag(i)); tagged {
					add(f.Type())
				}
			}
		}
		walk(c.obj.Type(), map[types.Type]bool{})
	}
	return pkgs
}

// packageNames returns every package-level name of the package: those of
// the type-checked files, and those declared in the files of the directory
// that this build configuration leaves out (other platforms, tags, cgo) or
// that only its tests compile, so that the generated file is the same and
// compiles everywhere.
func (m *pkgModel) packageNames() map[string]bool {
	names := map[string]bool{}
	p := m.pkg
	for _, name := range p.Types.Scope().Names() {
		names[name] = true
	}
	dir := filepath.Dir(m.genPath)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return names // the type-checked files are what there is
	}
	seen := map[string]bool{}
	for _, f := range p.CompiledGoFiles {
		seen[f] = true
	}
	for _, f := range p.GoFiles {
		seen[f] = true
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || seen[path] {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil || (e.Name() == FileName && isGenerated(src)) {
			continue
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil || f.Name.Name != p.Name {
			continue // an external test package, or a file the compiler will report
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
						for _, id := range s.Names {
							names[id.Name] = true
						}
					}
				}
			}
		}
	}
	delete(names, "_")
	delete(names, "init")
	return names
}
