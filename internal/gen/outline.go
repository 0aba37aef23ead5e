package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/tools/go/packages"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// outline is what a package's kinesis_gen.go declares: package-level names,
// and the header contracts it gives methods.
type outline struct {
	names     map[string]bool
	contracts map[string]bool
}

func (m *pkgModel) outline() *outline {
	o := &outline{names: map[string]bool{}, contracts: map[string]bool{}}
	for _, msg := range m.messages {
		o.names[msg.publisherFunc] = true
	}
	if len(m.subs) > 0 {
		o.names["Mount"] = true
	}
	for _, c := range m.contracts {
		o.contracts[c.name] = true
	}
	return o
}

// publisherFunc names the constructor of a message type's publisher:
// NewXPublisher, or newXPublisher for an unexported X, so that it is exactly
// as visible as the type it publishes.
func publisherFunc(typeName string) string {
	if token.IsExported(typeName) {
		return "New" + typeName + "Publisher"
	}
	return "new" + exported(typeName) + "Publisher"
}

// outlineDependencies adds the outlines of the packages that type errors of
// the run point at and that the run did not load: it reads their markers
// and tags from source, without type-checking them. Their own problems are
// theirs; the outline only tells which names generating them will declare.
func outlineDependencies(pkgs []*loadedPkg, outlines map[string]*outline, dir string, env []string) error {
	var missing []string
	for _, p := range pkgs {
		for _, e := range p.typeErrs {
			if path, _, _, ok := p.suspect(e); ok && outlines[path] == nil && !slices.Contains(missing, path) {
				missing = append(missing, path)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	deps, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles, Dir: dir, Env: env}, missing...)
	if err != nil {
		return err
	}
	for _, d := range deps {
		outlines[d.PkgPath] = outlineFromSource(d.GoFiles)
	}
	return nil
}

// outlineFromSource reads the markers and header tags of a package's files.
func outlineFromSource(files []string) *outline {
	o := &outline{names: map[string]bool{}, contracts: map[string]bool{}}
	// A struct that embeds a contract of the package (T or *T) is one too.
	embeds := map[string][]string{}
	defer func() {
		for changed := true; changed; {
			changed = false
			for name, inner := range embeds {
				if !o.contracts[name] && slices.ContainsFunc(inner, func(n string) bool { return o.contracts[n] }) {
					o.contracts[name], changed = true, true
				}
			}
		}
	}()
	fset := token.NewFileSet()
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil || (filepath.Base(name) == FileName && isGenerated(src)) {
			continue
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if hasMarker(fset, d.Doc, "subscriber") {
					o.names["Mount"] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					doc := ts.Doc
					if len(d.Specs) == 1 && !d.Lparen.IsValid() {
						doc = d.Doc
					}
					if hasMarker(fset, doc, "message") {
						o.names[publisherFunc(ts.Name.Name)] = true
					}
					if st, ok := ts.Type.(*ast.StructType); ok {
						o.contracts[ts.Name.Name] = taggedStruct(st)
						embeds[ts.Name.Name] = embeddedNames(st)
					}
				}
			}
		}
	}
	return o
}

func hasMarker(fset *token.FileSet, doc *ast.CommentGroup, name string) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if mk, diags := annotations.ParseComment(fset.Position(c.Slash), c.Text); mk != nil && len(diags) == 0 && mk.MarkerName() == name {
			return true
		}
	}
	return false
}

func taggedStruct(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		if tag, err := strconv.Unquote(f.Tag.Value); err == nil {
			if _, tagged, _ := annotations.HeaderTag(tag); tagged {
				return true
			}
		}
	}
	return false
}

// embeddedNames are the names of the package's types that st embeds.
func embeddedNames(st *ast.StructType) []string {
	var names []string
	for _, f := range st.Fields.List {
		if len(f.Names) > 0 {
			continue
		}
		t := f.Type
		if star, ok := t.(*ast.StarExpr); ok {
			t = star.X
		}
		if id, ok := t.(*ast.Ident); ok {
			names = append(names, id.Name)
		}
	}
	return names
}
