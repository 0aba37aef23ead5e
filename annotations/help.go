package annotations

import (
	_ "embed"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// The reference is rendered from the doc comments of this package's own
// source, so the marker types stay its single source of truth.
var (
	//go:embed markers.go
	markersSrc string
	//go:embed tags.go
	tagsSrc string
)

// Help is the marker and tag reference that kinesisgen -help prints,
// rendered from the doc comments of Message, Subscriber and TagKey.
func Help() string {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, src := range []struct{ name, text string }{{"markers.go", markersSrc}, {"tags.go", tagsSrc}} {
		f, err := parser.ParseFile(fset, src.name, src.text, parser.ParseComments)
		if err != nil {
			panic("annotations: embedded source does not parse: " + err.Error())
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/kinesisgen/kinesisgen/annotations")
	if err != nil {
		panic("annotations: " + err.Error())
	}
	var b strings.Builder
	for _, spec := range specs {
		for _, t := range pkg.Types {
			if t.Name == spec.typ.Name() {
				writeMarkerHelp(&b, pkg, t, spec)
			}
		}
	}
	for _, c := range pkg.Consts {
		if slices.Contains(c.Names, "TagKey") {
			b.WriteString("Struct tag `kinesis:\"HEADER\"`\n\n")
			b.WriteString(indent(pkg.Text(c.Doc)))
		}
	}
	return b.String()
}

func writeMarkerHelp(b *strings.Builder, pkg *doc.Package, t *doc.Type, spec *markerSpec) {
	b.WriteString(synopsis(spec) + "\n\n")
	b.WriteString(indent(pkg.Text(t.Doc)))
	b.WriteString("\n")
	st := t.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.StructType)
	for _, field := range st.Fields.List {
		if len(field.Names) != 1 || field.Doc == nil {
			continue
		}
		f := specField(spec, field.Names[0].Name)
		if f == nil {
			continue
		}
		head := "  " + f.key
		if !f.flag {
			head += "=" + f.meta
		}
		if f.required {
			head += " (required)"
		}
		b.WriteString(head + "\n")
		b.WriteString(indent([]byte(indent(pkg.Text(field.Doc.Text())))))
	}
	b.WriteString("\n")
}

// synopsis is the one-line grammar of a marker, from its field tags.
func synopsis(spec *markerSpec) string {
	parts := []string{Prefix + spec.name}
	for _, f := range spec.fields {
		arg := f.key
		if !f.flag {
			arg += "=" + f.meta
		}
		if !f.required {
			arg = "[" + arg + "]"
		}
		parts = append(parts, arg)
	}
	return strings.Join(parts, " ")
}

func specField(spec *markerSpec, goName string) *fieldSpec {
	for _, f := range spec.fields {
		if f.name == goName {
			return f
		}
	}
	return nil
}

func indent(s []byte) string {
	var b strings.Builder
	for line := range strings.Lines(string(s)) {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line)
	}
	return b.String()
}
