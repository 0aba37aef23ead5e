package gen

import (
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/tools/go/packages"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// foreignMessage is a //kinesis:message of another package than the one
// checking it: its marker, and the package it is in.
type foreignMessage struct {
	pkgName string
	name    string
	marker  *annotations.Message
}

func (f *foreignMessage) qualified() string { return f.pkgName + "." + f.name }

// checkAcrossPackages applies the stream rules that each package applies to
// itself across packages: a handler must read the stream of the
// //kinesis:message it takes, whichever package declares it (one of the run,
// or a dependency read from source, since go generate runs one package at a
// time), and two message types of the run's packages may share a stream
// only if each says shared.
func checkAcrossPackages(models []*pkgModel, dir string, env []string, diags *diagnostics) error {
	inRun := map[string]*pkgModel{}
	for _, m := range models {
		if m.pkg.Types != nil {
			inRun[m.pkg.PkgPath] = m
		}
	}
	// The message types that handlers take from other packages.
	var missing []string
	for _, m := range models {
		for _, h := range m.subs {
			if path := foreignPath(m, h); path != "" && inRun[path] == nil && !slices.Contains(missing, path) {
				missing = append(missing, path)
			}
		}
	}
	fromSource := map[string]map[string]*foreignMessage{}
	if len(missing) > 0 {
		slices.Sort(missing)
		deps, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles, Dir: dir, Env: env}, missing...)
		if err != nil {
			return err
		}
		for _, d := range deps {
			fromSource[d.PkgPath] = messagesFromSource(d.Name, d.GoFiles)
		}
	}
	lookup := func(path, name string) *foreignMessage {
		if m := inRun[path]; m != nil {
			if msg := m.byName[name]; msg != nil {
				return &foreignMessage{pkgName: m.pkg.Name, name: msg.name, marker: msg.marker}
			}
			return nil
		}
		return fromSource[path][name]
	}
	for _, m := range models {
		for _, h := range m.subs {
			path := foreignPath(m, h)
			if path == "" {
				continue
			}
			if msg := lookup(path, h.msg.Obj().Name()); msg != nil && msg.marker.Stream != h.marker.Stream {
				diags.add(h.marker.KeyPos["stream"], "stream=%s, but handler %s takes %s, a //kinesis:message of stream %s (%s)",
					h.marker.Stream, h.name, msg.qualified(), msg.marker.Stream, diags.relative(msg.marker.Pos))
			}
		}
	}
	checkSharedAcross(models, diags)
	return nil
}

// foreignPath is the import path of the package of the handler's message
// type when that is not the handler's own package, else "".
func foreignPath(m *pkgModel, h *handler) string {
	if h.msg == nil || h.msg.Obj().Pkg() == nil || h.msg.Obj().Pkg() == m.pkg.Types {
		return ""
	}
	return h.msg.Obj().Pkg().Path()
}

// checkSharedAcross reports a message type on the stream of a message type
// of another package of the run, unless it says shared.
func checkSharedAcross(models []*pkgModel, diags *diagnostics) {
	type entry struct {
		m   *pkgModel
		msg *message
	}
	byStream := map[string][]entry{}
	for _, m := range models {
		for _, msg := range m.messages {
			byStream[msg.marker.Stream] = append(byStream[msg.marker.Stream], entry{m, msg})
		}
	}
	for _, list := range byStream {
		slices.SortFunc(list, func(a, b entry) int {
			return cmp.Or(cmp.Compare(a.m.pkg.PkgPath, b.m.pkg.PkgPath), cmp.Compare(a.msg.name, b.msg.name))
		})
		for _, x := range list {
			if x.msg.marker.Shared {
				continue
			}
			for _, o := range list {
				if o.m == x.m {
					continue // the package's own check
				}
				diags.add(x.msg.marker.KeyPos["stream"], "stream %s is also the stream of message %s.%s (%s); a subscriber reads a stream as one type: mark each message of the stream shared if this is deliberate",
					x.msg.marker.Stream, o.m.pkg.Name, o.msg.name, diags.relative(o.msg.marker.Pos))
				break
			}
		}
	}
}

// messagesFromSource reads the //kinesis:message markers of a package's
// files without type-checking them.
func messagesFromSource(pkgName string, files []string) map[string]*foreignMessage {
	out := map[string]*foreignMessage{}
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
			d, ok := decl.(*ast.GenDecl)
			if !ok || d.Tok != token.TYPE {
				continue
			}
			for _, spec := range d.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if len(d.Specs) == 1 && !d.Lparen.IsValid() {
					doc = d.Doc
				}
				if doc == nil {
					continue
				}
				for _, c := range doc.List {
					if mk, ds := annotations.ParseComment(fset.Position(c.Slash), c.Text); len(ds) == 0 {
						if msg, ok := mk.(*annotations.Message); ok {
							out[ts.Name.Name] = &foreignMessage{pkgName: pkgName, name: ts.Name.Name, marker: msg}
						}
					}
				}
			}
		}
	}
	return out
}
