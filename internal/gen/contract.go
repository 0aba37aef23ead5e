package gen

import (
	"errors"
	"go/ast"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kinesisgen/kinesisgen/annotations"
	kcontract "github.com/kinesisgen/kinesisgen/internal/contract"
)

// contracts is the last stage: it compares each package's code with its
// kinesis.lock.json, adds the lock to write to Contracts (or to remove, when no marker is
// left) and, when asked, the AsyncAPI document of the run. Breaking changes
// are diagnostics, or under LockAccept the changes the new locks accept.
func contracts(cfg Config, dir string, models []*pkgModel, res *Result, diags *diagnostics) {
	var described []*kcontract.Package
	for _, m := range models {
		if m.genPath == "" || m.pkg.Types == nil {
			continue
		}
		lockPath := filepath.Join(filepath.Dir(m.genPath), kcontract.LockFile)
		src, err := os.ReadFile(lockPath)
		src = LF(src) // a CRLF checkout's lock reads the same
		switch {
		case errors.Is(err, fs.ErrNotExist):
			src = nil
		case err != nil:
			diags.add(token.Position{Filename: lockPath}, "%v", err)
			continue
		}
		if m.empty() && src == nil {
			continue
		}
		cp := m.describe()
		cur, problems := kcontract.Derive(cp)
		if len(problems) > 0 {
			diags.addAll(problems)
			continue
		}
		if src != nil {
			old, err := kcontract.ParseLock(src)
			switch {
			case err != nil && cfg.Lock != LockAccept:
				diags.add(token.Position{Filename: lockPath, Line: 1, Column: 1}, "%v; restore it from version control, or rewrite it from the code with kinesisgen -lock", err)
				continue
			case err == nil:
				for _, w := range kcontract.Notices(old, cur) {
					res.Warnings = append(res.Warnings, annotations.Diagnostic{Pos: diags.relative(w.Pos), Msg: w.Msg})
				}
				breaks := kcontract.Breaks(old, cur, lockPath, src)
				if cfg.Lock == LockAccept {
					for _, b := range breaks {
						res.Accepted = append(res.Accepted, annotations.Diagnostic{Pos: diags.relative(b.Pos), Msg: b.Msg})
					}
				} else if len(breaks) > 0 {
					diags.addAll(breaks)
					continue
				}
			}
		}
		if m.empty() {
			res.Remove = append(res.Remove, lockPath)
			continue
		}
		res.Contracts = append(res.Contracts, File{Path: lockPath, Content: cur.Marshal()})
		described = append(described, cp)
	}
	if cfg.AsyncAPI == "" || len(diags.list) > 0 {
		return
	}
	path := cfg.AsyncAPI
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	doc, problems := kcontract.AsyncAPI(described, !strings.EqualFold(filepath.Ext(path), ".json"))
	diags.addAll(problems)
	res.Contracts = append(res.Contracts, File{Path: path, Content: doc})
}

// describe is the package's model as internal/contract takes it.
func (m *pkgModel) describe() *kcontract.Package {
	p := m.pkg
	docs := docComments(p.Syntax)
	cp := &kcontract.Package{
		Path:  p.PkgPath,
		Name:  p.Name,
		Types: p.Types,
		Fset:  p.Fset,
		Doc:   func(pos token.Pos) string { return docs[pos] },
	}
	described := map[*contract]*kcontract.Headers{}
	headers := func(c *contract) *kcontract.Headers {
		if c == nil {
			return nil
		}
		if h := described[c]; h != nil {
			return h
		}
		h := &kcontract.Headers{Name: c.name, Type: c.obj.Type().(*types.Named)}
		for _, f := range c.fields {
			h.Fields = append(h.Fields, kcontract.HeaderField{GoName: f.goName, Header: f.header, Type: f.typ, Pos: f.pos, Doc: docs[f.at]})
		}
		described[c] = h
		return h
	}
	for _, msg := range m.messages {
		tn := p.Types.Scope().Lookup(msg.name).(*types.TypeName)
		cp.Messages = append(cp.Messages, &kcontract.Message{
			Name:      msg.name,
			Type:      tn.Type().(*types.Named),
			Doc:       docs[tn.Pos()],
			Marker:    msg.marker,
			Headers:   headers(msg.headers),
			Publisher: msg.publisherFunc,
		})
	}
	for _, h := range m.subs {
		s := &kcontract.Subscriber{Name: h.qualified(), Doc: docs[h.at], Marker: h.marker, Pos: h.position, Message: h.msg}
		if n, ok := h.headers.(*types.Named); ok && n.Obj().Pkg() == p.Types {
			s.Headers = headers(m.contractOf[n.Obj().Name()])
		}
		for _, out := range h.outs {
			s.Publishes = append(s.Publishes, out.name)
		}
		if h.reply != nil {
			s.Reply = h.reply.name
		}
		cp.Subscribers = append(cp.Subscribers, s)
	}
	return cp
}

// docComments maps the name positions of the type, field and function
// declarations of files to their doc comments, directives left out.
func docComments(files []*ast.File) map[token.Pos]string {
	docs := map[token.Pos]string{}
	text := func(groups ...*ast.CommentGroup) string {
		for _, g := range groups {
			if s := strings.TrimSpace(g.Text()); s != "" {
				return s
			}
		}
		return ""
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok == token.TYPE && !n.Lparen.IsValid() && len(n.Specs) == 1 {
					ts := n.Specs[0].(*ast.TypeSpec)
					docs[ts.Name.Pos()] = text(ts.Doc, n.Doc)
				}
			case *ast.TypeSpec:
				if s := text(n.Doc); s != "" {
					docs[n.Name.Pos()] = s
				}
			case *ast.FuncDecl:
				docs[n.Name.Pos()] = text(n.Doc)
			case *ast.Field:
				for _, name := range n.Names {
					docs[name.Pos()] = text(n.Doc, n.Comment)
				}
			}
			return true
		})
	}
	return docs
}
