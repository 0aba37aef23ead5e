package gen

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// pkgModel is what one package asks the generator for, validated.
type pkgModel struct {
	pkg        *loadedPkg
	genPath    string
	ownGenFile bool
	messages   []*message  // by name
	contracts  []*contract // by name
	subs       []*handler  // by receiver type, then name
	receivers  []*receiver // by type name
	byName     map[string]*message
	contractOf map[string]*contract
	fileNames  *fileNames // the generated file's names: built on first use
}

func (m *pkgModel) empty() bool {
	return len(m.messages) == 0 && len(m.contracts) == 0 && len(m.subs) == 0
}

// message is a //kinesis:message type.
type message struct {
	name          string
	marker        *annotations.Message
	headers       *contract // from headers=, or nil
	publisherFunc string    // NewXPublisher
}

// contract is a header contract: a struct with kinesis-tagged fields.
type contract struct {
	name   string
	obj    *types.TypeName
	fields []headerField
}

type fieldKind uint8

const (
	kindString fieldKind = iota
	kindBool
	kindInt
	kindUint
	kindTime
)

// embedStep is one embedded struct field on the way from a header
// contract to a tagged field of a struct it embeds.
type embedStep struct {
	name  string       // the embedded field's name
	ptr   bool         // embedded as *T: nil on encode is absent, allocated on decode
	named *types.Named // T
	pos   token.Pos    // the embedded field
}

// embeddedStruct returns the step into f when f is an embedded struct (or
// pointer to struct) of a defined type.
func embeddedStruct(f *types.Var) (embedStep, *types.Struct, bool) {
	if !f.Embedded() {
		return embedStep{}, nil, false
	}
	t := types.Unalias(f.Type())
	ptr := false
	if pt, ok := t.(*types.Pointer); ok {
		t, ptr = types.Unalias(pt.Elem()), true
	}
	named, ok := t.(*types.Named)
	if !ok || named.TypeArgs().Len() > 0 {
		return embedStep{}, nil, false
	}
	st, ok := named.Underlying().(*types.Struct)
	if !ok {
		return embedStep{}, nil, false
	}
	return embedStep{name: f.Name(), ptr: ptr, named: named, pos: f.Pos()}, st, true
}

// pathName is the field's name as Go selects it from the contract: Base.Tenant.
func pathName(path []embedStep, name string) string {
	var b strings.Builder
	for _, s := range path {
		b.WriteString(s.name + ".")
	}
	return b.String() + name
}

// reachable reports whether code of pkg can select f through path.
func reachable(pkg *types.Package, path []embedStep, f *types.Var) bool {
	if !f.Exported() && f.Pkg() != pkg {
		return false
	}
	for _, s := range path {
		if !token.IsExported(s.name) && s.named.Obj().Pkg() != pkg {
			return false
		}
	}
	return true
}

type headerField struct {
	path   []embedStep // the embedded fields it is reached through, outermost first
	goName string
	header string
	kind   fieldKind
	typ    types.Type // the field's type, for conversions
	bits   int        // strconv bit size of integer kinds (0: int/uint)
	named  bool       // typ is a defined type (conversions needed)
	pos    token.Position
	at     token.Pos
}

// handler is a //kinesis:subscriber function or method.
type handler struct {
	name     string // function or method name
	marker   *annotations.Subscriber
	recv     *receiver
	msg      *types.Named
	headers  types.Type  // nil without a headers parameter
	params   []paramKind // after ctx and msg, in order
	outs     []*message  // for each paramOut, in order
	result   resultKind
	reply    *message
	position token.Position
	at       token.Pos // the name's position
}

type paramKind uint8

const (
	paramHeaders paramKind = iota
	paramOut
	paramDelivery
)

type resultKind uint8

const (
	resultOutcome resultKind = iota
	resultError
	resultReply    // Y
	resultReplyErr // (Y, error)
)

// receiver is a type whose methods are handlers: a parameter of Mount.
type receiver struct {
	obj *types.TypeName
}

// markedDecl is a declaration with its markers.
type markedDecl struct {
	markers []annotations.Marker
	fn      *ast.FuncDecl
	typ     *ast.TypeSpec
}

// buildModel collects the markers of p and validates them into a model.
// Problems go to diags; the model is returned even then, so that load errors
// can still be forgiven against what would be generated.
func buildModel(p *loadedPkg, diags *diagnostics) *pkgModel {
	m := &pkgModel{pkg: p, genPath: p.genPath, ownGenFile: p.ownGenFile, byName: map[string]*message{}, contractOf: map[string]*contract{}}
	checkIgnoredFiles(p, diags)
	checkTestFiles(p, diags)
	if p.Types == nil || p.TypesInfo == nil {
		return m
	}
	decls := collect(p, diags)
	m.findContracts(diags)
	var subDecls []*markedDecl
	for _, d := range decls {
		for _, mk := range d.markers {
			switch mk := mk.(type) {
			case *annotations.Message:
				m.addMessage(d, mk, diags)
			case *annotations.Subscriber:
				subDecls = append(subDecls, d)
			}
		}
	}
	slices.SortFunc(m.messages, func(a, b *message) int { return cmp.Compare(a.name, b.name) })
	m.checkPublisherNames(diags)
	m.checkSharedStreams(diags)
	// Handlers refer to messages (streams, publishers, replies), so they come after.
	for _, d := range subDecls {
		m.addHandler(d, d.markers[0].(*annotations.Subscriber), diags)
	}
	slices.SortFunc(m.receivers, func(a, b *receiver) int { return cmp.Compare(a.obj.Name(), b.obj.Name()) })
	slices.SortFunc(m.subs, func(a, b *handler) int {
		return cmp.Or(cmp.Compare(a.recvName(), b.recvName()), cmp.Compare(a.name, b.name))
	})
	m.checkStreams(diags)
	if (len(decls) > 0 || !m.empty()) && p.userGen {
		diags.add(token.Position{Filename: p.genPath, Line: 1, Column: 1}, "%s was not written by kinesisgen (no %q line); rename it, kinesisgen needs the name", FileName, Header)
	}
	if len(m.subs) > 0 {
		m.checkFree("Mount", "kinesisgen generates Mount for the //kinesis:subscriber handlers of this package", diags)
	}
	return m
}

func (h *handler) recvName() string {
	if h.recv == nil {
		return ""
	}
	return h.recv.obj.Name()
}

// collect reads the markers of every declaration of p, and reports markers
// that are misplaced, duplicated or on the wrong kind of declaration.
func collect(p *loadedPkg, diags *diagnostics) []*markedDecl {
	var out []*markedDecl
	for _, f := range p.Syntax {
		filename := p.Fset.Position(f.Pos()).Filename
		if filepath.Base(filename) == FileName && p.ownGenFile {
			continue
		}
		docs := map[*ast.CommentGroup]bool{}
		constrained := p.constraint.of(filename)
		parse := func(doc *ast.CommentGroup) []annotations.Marker {
			if doc == nil {
				return nil
			}
			docs[doc] = true
			var ms []annotations.Marker
			for _, c := range doc.List {
				mk, ds := annotations.ParseComment(p.Fset.Position(c.Slash), c.Text)
				diags.addAll(ds)
				if mk != nil && constrained != "" {
					constrainedMarker(diags, mk, constrained)
					continue
				}
				if mk != nil && len(ds) == 0 {
					ms = append(ms, mk)
				} else if mk != nil {
					// A marker with errors still counts for duplicates and
					// placement, but is not generated from.
					ms = append(ms, brokenMarker{mk})
				}
			}
			return ms
		}
		// keep places the markers of a function or type declaration and
		// keeps the declaration if any of them fits.
		keep := func(ms []annotations.Marker, fn *ast.FuncDecl, ts *ast.TypeSpec) {
			if len(ms) == 0 {
				return
			}
			var what string
			if ts != nil {
				what = "type " + ts.Name.Name
			} else {
				what = "function " + fn.Name.Name
			}
			if md := place(&markedDecl{fn: fn, typ: ts}, ms, what, diags); md != nil {
				out = append(out, md)
			}
		}
		misplaced := func(ms []annotations.Marker, tok token.Token) {
			for _, mk := range ms {
				diags.add(mk.Position(), "%s%s must be on a %s, not on %s declaration", annotations.Prefix, mk.MarkerName(), wantDecl(mk), withArticle(tok))
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				keep(parse(d.Doc), d, nil)
			case *ast.GenDecl:
				ms := parse(d.Doc)
				if d.Tok == token.TYPE && !d.Lparen.IsValid() && len(d.Specs) == 1 {
					ts := d.Specs[0].(*ast.TypeSpec)
					keep(append(ms, parse(ts.Doc)...), nil, ts)
					continue
				}
				if d.Tok == token.TYPE {
					for _, mk := range ms {
						diags.add(mk.Position(), "%s%s on a grouped type declaration; put it on the type inside the group", annotations.Prefix, mk.MarkerName())
					}
				} else {
					misplaced(ms, d.Tok)
				}
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						keep(parse(s.Doc), nil, s)
					case *ast.ValueSpec:
						misplaced(parse(s.Doc), d.Tok)
					}
				}
			}
		}
		// A marker anywhere else (detached by a blank line, inside a body)
		// would be ignored silently; say so instead.
		for _, g := range f.Comments {
			if docs[g] {
				continue
			}
			for _, c := range g.List {
				if annotations.IsMarker(c.Text) {
					diags.add(p.Fset.Position(c.Slash), "marker is not in the doc comment of a declaration (no blank line may separate it from the declaration)")
				}
			}
		}
	}
	return out
}

func withArticle(tok token.Token) string {
	if tok == token.IMPORT {
		return "an import"
	}
	return "a " + tok.String()
}

// brokenMarker stands for a marker that parsed with errors.
type brokenMarker struct{ annotations.Marker }

func wantDecl(mk annotations.Marker) string {
	if mk.MarkerName() == "message" {
		return "struct type"
	}
	return "function or method"
}

// place checks that the markers fit the declaration and keeps the good ones.
func place(md *markedDecl, ms []annotations.Marker, what string, diags *diagnostics) *markedDecl {
	seen := map[string]token.Position{}
	for _, mk := range ms {
		name := mk.MarkerName()
		if first, dup := seen[name]; dup {
			diags.add(mk.Position(), "second %s%s on %s (first at line %d)", annotations.Prefix, name, what, first.Line)
			continue
		}
		seen[name] = mk.Position()
		isType := md.typ != nil
		if (name == "message") != isType {
			diags.add(mk.Position(), "%s%s must be on a %s, not on %s", annotations.Prefix, name, wantDecl(mk), what)
			continue
		}
		if _, broken := mk.(brokenMarker); broken {
			continue
		}
		md.markers = append(md.markers, mk)
	}
	if len(md.markers) == 0 {
		return nil
	}
	return md
}

// findContracts finds every struct of the package with kinesis-tagged fields.
func (m *pkgModel) findContracts(diags *diagnostics) {
	p := m.pkg
	scope := p.Types.Scope()
	for _, name := range scope.Names() { // sorted
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() || m.inGenFile(tn.Pos()) {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		st, ok := named.Underlying().(*types.Struct)
		if !ok {
			continue
		}
		c := &contract{name: name, obj: tn}
		if why := p.constraint.of(p.Fset.Position(tn.Pos()).Filename); why != "" {
			for i := range st.NumFields() {
				if _, tagged, _ := annotations.HeaderTag(st.Tag(i)); tagged {
					constrainedTag(diags, p.Fset.Position(st.Field(i).Pos()), st.Field(i).Name(), name, why)
				}
			}
			continue
		}
		seen := map[string]bool{}
		anyTagged := false
		// walk adds the tagged fields of st, reached from the contract
		// through the embedded fields of path.
		var walk func(st *types.Struct, path []embedStep, visiting map[*types.Named]bool)
		walk = func(st *types.Struct, path []embedStep, visiting map[*types.Named]bool) {
			for i := range st.NumFields() {
				f := st.Field(i)
				header, tagged, err := annotations.HeaderTag(st.Tag(i))
				if !tagged {
					if step, sub, ok := embeddedStruct(f); ok && !visiting[step.named] {
						visiting[step.named] = true
						walk(sub, append(slices.Clip(path), step), visiting)
						delete(visiting, step.named)
					}
					continue
				}
				anyTagged = true
				pos := p.Fset.Position(f.Pos())
				goName := pathName(path, f.Name())
				if err != nil {
					diags.add(pos, "field %s: %v", goName, err)
					continue
				}
				if f.Embedded() {
					diags.add(pos, "embedded field %s cannot be a header; name the field", goName)
					continue
				}
				if !reachable(p.Types, path, f) {
					// Reported at the embedding, the part of it this package can change.
					diags.add(p.Fset.Position(path[0].pos), "header field %s of %s is unexported in another package, so kinesisgen cannot set it; name the embedded field (its headers are then not %s's)", goName, name, name)
					continue
				}
				hf, ok := headerFieldOf(f, header)
				hf.goName, hf.path = goName, slices.Clone(path)
				hf.pos, hf.at = pos, f.Pos()
				if !ok {
					diags.add(pos, "header field %s has type %s; a header field is a string, integer or bool kind, or time.Time", goName, types.TypeString(f.Type(), types.RelativeTo(p.Types)))
					continue
				}
				if header == partitionKeyHeader && (hf.kind == kindBool || hf.kind == kindTime) {
					// A bool could only ever key "true" (false is no key), and a
					// time's text is a poor key: both spread nothing.
					diags.add(pos, "partition-key field %s has type %s; a partition key is a string or integer kind (its zero value is no key: an error at publish)", goName, types.TypeString(f.Type(), types.RelativeTo(p.Types)))
					continue
				}
				if seen[header] {
					diags.add(pos, "header %q is named by two fields of %s", header, name)
					continue
				}
				seen[header] = true
				c.fields = append(c.fields, hf)
			}
		}
		walk(st, nil, map[*types.Named]bool{named: true})
		if !anyTagged {
			continue
		}
		if named.TypeParams().Len() > 0 {
			diags.add(p.Fset.Position(tn.Pos()), "header contract %s cannot be generic", name)
			continue
		}
		for _, method := range []string{"EncodeHeaders", "DecodeHeaders"} {
			// Only a method of the type itself: one promoted from an
			// embedded contract is shadowed by the generated one.
			if obj, index, _ := types.LookupFieldOrMethod(types.NewPointer(named), true, p.Types, method); obj != nil && len(index) == 1 && !m.inGenFile(obj.Pos()) {
				diags.add(p.Fset.Position(obj.Pos()), "%s.%s is declared here; kinesisgen generates it for the header contract %s", name, method, name)
			}
		}
		m.contracts = append(m.contracts, c)
		m.contractOf[name] = c
	}
}

func (m *pkgModel) inGenFile(pos token.Pos) bool {
	return m.ownGenFile && m.pkg.Fset.Position(pos).Filename == m.genPath
}

// fieldName is the field's own name, without the embedded path.
func (hf headerField) fieldName() string {
	if i := strings.LastIndexByte(hf.goName, '.'); i >= 0 {
		return hf.goName[i+1:]
	}
	return hf.goName
}

func headerFieldOf(f *types.Var, header string) (headerField, bool) {
	t := types.Unalias(f.Type())
	hf := headerField{goName: f.Name(), header: header, typ: t}
	if n, ok := t.(*types.Named); ok {
		if obj := n.Obj(); obj.Pkg() != nil && obj.Pkg().Path() == "time" && obj.Name() == "Time" {
			hf.kind = kindTime
			return hf, true
		}
		hf.named = true
	}
	b, ok := t.Underlying().(*types.Basic)
	if !ok {
		return hf, false
	}
	switch b.Kind() {
	case types.String:
		hf.kind = kindString
	case types.Bool:
		hf.kind = kindBool
	case types.Int, types.Int8, types.Int16, types.Int32, types.Int64:
		hf.kind, hf.bits = kindInt, intBits(b.Kind())
	case types.Uint, types.Uint8, types.Uint16, types.Uint32, types.Uint64:
		hf.kind, hf.bits = kindUint, intBits(b.Kind())
	default:
		return hf, false
	}
	return hf, true
}

func intBits(k types.BasicKind) int {
	switch k {
	case types.Int8, types.Uint8:
		return 8
	case types.Int16, types.Uint16:
		return 16
	case types.Int32, types.Uint32:
		return 32
	case types.Int64, types.Uint64:
		return 64
	}
	return 0
}

func (m *pkgModel) addMessage(d *markedDecl, mk *annotations.Message, diags *diagnostics) {
	p := m.pkg
	tn, _ := p.TypesInfo.Defs[d.typ.Name].(*types.TypeName)
	if tn == nil {
		return
	}
	pos := p.Fset.Position(d.typ.Name.Pos())
	named, ok := tn.Type().(*types.Named)
	if tn.IsAlias() || !ok {
		diags.add(pos, "//kinesis:message type %s is an alias; put the marker on the struct type it names", tn.Name())
		return
	}
	if _, ok := named.Underlying().(*types.Struct); !ok {
		diags.add(pos, "//kinesis:message type %s is not a struct", tn.Name())
		return
	}
	if named.TypeParams().Len() > 0 {
		diags.add(pos, "//kinesis:message type %s cannot be generic", tn.Name())
		return
	}
	msg := &message{name: tn.Name(), marker: mk, publisherFunc: publisherFunc(tn.Name())}
	if mk.Headers != "" {
		msg.headers = m.contractOf[mk.Headers]
		if msg.headers == nil {
			diags.add(mk.KeyPos["headers"], "headers=%s: no header contract %s in this package (a struct with `kinesis:\"HEADER\"` field tags)", mk.Headers, mk.Headers)
			return
		}
	}
	m.checkOwnTags(msg, diags)
	m.messages = append(m.messages, msg)
	m.byName[msg.name] = msg
}

// checkOwnTags reports kinesis tags on a message's own fields when its
// marker does not name the message itself as its headers=: a publish of it
// neither sends those fields as headers nor keys by them, so the tag would
// do nothing.
func (m *pkgModel) checkOwnTags(msg *message, diags *diagnostics) {
	own := m.contractOf[msg.name] // its tagged fields, embedded ones too
	if own == nil || (msg.headers != nil && msg.headers.name == msg.name) {
		return
	}
	for _, f := range own.fields {
		if f.header == partitionKeyHeader {
			fix := fmt.Sprintf("add headers=%s to its marker and publish with pub.Message(msg).Headers(msg)", msg.name)
			if msg.headers != nil {
				fix = "move the field to its header contract " + msg.headers.name
			}
			diags.add(f.pos, "field %s of //kinesis:message %s is tagged kinesis:%q, but a message's own fields do not key its publish (it takes its key from elsewhere, often a process-unique key): key each publish with pub.Message(msg).PartitionKey(msg.%s), or %s",
				f.goName, msg.name, f.header, f.goName, fix)
			continue
		}
		if msg.headers != nil {
			diags.add(f.pos, "field %s of //kinesis:message %s is tagged kinesis:%q, but a message's own fields are not sent as headers: move the field to its header contract %s",
				f.goName, msg.name, f.header, msg.headers.name)
			continue
		}
		diags.add(f.pos, "field %s of //kinesis:message %s is tagged kinesis:%q, but a message's own fields are not sent as headers: add headers=%s to its marker and publish with pub.Message(msg).Headers(msg), or move the field to a header contract",
			f.goName, msg.name, f.header, msg.name)
	}
}

// checkPublisherNames reports generated names that collide with each other
// or with the package's own declarations.
func (m *pkgModel) checkPublisherNames(diags *diagnostics) {
	seen := map[string]*message{}
	for _, msg := range m.messages {
		if other := seen[msg.publisherFunc]; other != nil {
			diags.add(msg.marker.Pos, "//kinesis:message %s and %s both need %s; rename one", other.name, msg.name, msg.publisherFunc)
			continue
		}
		seen[msg.publisherFunc] = msg
		m.checkFree(msg.publisherFunc, "kinesisgen generates it for //kinesis:message "+msg.name, diags)
	}
}

// checkFree reports a package-level declaration of a name the generator owns.
func (m *pkgModel) checkFree(name, why string, diags *diagnostics) {
	if obj := m.pkg.Types.Scope().Lookup(name); obj != nil && !m.inGenFile(obj.Pos()) {
		diags.add(m.pkg.Fset.Position(obj.Pos()), "%s is declared here; %s", name, why)
	}
}

// checkStreams reports two handlers of the package on one stream, which the
// runtime would refuse at Mount.
// checkSharedStreams reports two message types on one stream, unless each
// says shared: a subscriber decodes every record of a stream as one type,
// so a second type there is usually a copied marker.
func (m *pkgModel) checkSharedStreams(diags *diagnostics) {
	byPos := slices.Clone(m.messages)
	slices.SortFunc(byPos, func(a, b *message) int {
		return cmp.Or(cmp.Compare(a.marker.Pos.Filename, b.marker.Pos.Filename), cmp.Compare(a.marker.Pos.Offset, b.marker.Pos.Offset))
	})
	first := map[string]*message{}
	reported := map[*message]bool{}
	for _, msg := range byPos {
		f := first[msg.marker.Stream]
		if f == nil {
			first[msg.marker.Stream] = msg
			continue
		}
		for _, x := range []*message{f, msg} {
			if x.marker.Shared || reported[x] {
				continue
			}
			reported[x] = true
			other := f
			if x == f {
				other = msg
			}
			diags.add(x.marker.KeyPos["stream"], "stream %s is also the stream of message %s (line %d); a subscriber reads a stream as one type: mark each message of the stream shared if this is deliberate",
				x.marker.Stream, other.name, other.marker.Pos.Line)
		}
	}
}

func (m *pkgModel) checkStreams(diags *diagnostics) {
	first := map[string]*handler{}
	byPos := slices.Clone(m.subs)
	slices.SortFunc(byPos, func(a, b *handler) int {
		return cmp.Or(cmp.Compare(a.position.Filename, b.position.Filename), cmp.Compare(a.position.Offset, b.position.Offset))
	})
	for _, h := range byPos {
		if f := first[h.marker.Stream]; f != nil {
			diags.add(h.marker.KeyPos["stream"], "stream %s already has the subscriber %s (line %d); a broker reads a stream once", h.marker.Stream, f.qualified(), f.position.Line)
			continue
		}
		first[h.marker.Stream] = h
	}
}

// qualified is the handler's name as Go would write a method expression.
func (h *handler) qualified() string {
	if h.recv == nil {
		return h.name
	}
	return h.recv.obj.Name() + "." + h.name
}

func (m *pkgModel) addHandler(d *markedDecl, mk *annotations.Subscriber, diags *diagnostics) {
	p := m.pkg
	fn, _ := p.TypesInfo.Defs[d.fn.Name].(*types.Func)
	if fn == nil {
		return
	}
	pos := p.Fset.Position(d.fn.Name.Pos())
	sig := fn.Type().(*types.Signature)
	h := &handler{name: fn.Name(), marker: mk, position: pos, at: d.fn.Name.Pos()}
	bad := false
	fail := func(at token.Position, format string, args ...any) {
		diags.add(at, format, args...)
		bad = true
	}
	if sig.TypeParams().Len() > 0 {
		fail(pos, "handler %s cannot be generic", fn.Name())
	}
	if r := sig.Recv(); r != nil {
		// A receiver may be declared through an alias (type Svc = Service):
		// the method is the aliased type's, and Mount takes that.
		t := types.Unalias(r.Type())
		if ptr, ok := t.(*types.Pointer); ok {
			t = types.Unalias(ptr.Elem())
		}
		named, ok := t.(*types.Named)
		switch {
		case !ok:
			fail(pos, "handler %s has an unnamed receiver type", fn.Name())
		case named.TypeArgs().Len() > 0:
			fail(pos, "handler %s is a method of a generic type; Mount cannot take its receiver", fn.Name())
		default:
			h.recv = m.receiverFor(named.Obj())
		}
	}
	if sig.Variadic() {
		fail(pos, "handler %s cannot be variadic", fn.Name())
		return
	}
	params := sig.Params()
	shape := "func(ctx context.Context, msg M, [headers H,] [out runtime.Publisher[X], ...] [d runtime.Delivery]) R"
	if params.Len() < 2 {
		fail(pos, "handler %s must have the shape %s", fn.Name(), shape)
	} else {
		if !isNamed(params.At(0).Type(), "context", "Context") {
			fail(p.Fset.Position(params.At(0).Pos()), "first parameter of handler %s must be context.Context", fn.Name())
		}
		h.msg = m.checkMsgParam(h, params.At(1), fail)
		m.checkExtraParams(h, params, fail)
	}
	m.checkResults(h, sig, pos, fail)
	if !bad {
		m.subs = append(m.subs, h)
	}
}

func (m *pkgModel) receiverFor(obj *types.TypeName) *receiver {
	for _, r := range m.receivers {
		if r.obj == obj {
			return r
		}
	}
	r := &receiver{obj: obj}
	m.receivers = append(m.receivers, r)
	return r
}

func (m *pkgModel) typeString(t types.Type) string {
	return types.TypeString(t, types.RelativeTo(m.pkg.Types))
}

func (m *pkgModel) checkMsgParam(h *handler, v *types.Var, fail func(token.Position, string, ...any)) *types.Named {
	pos := m.pkg.Fset.Position(v.Pos())
	named, ok := types.Unalias(v.Type()).(*types.Named)
	if !ok {
		fail(pos, "message parameter of handler %s has type %s; want a named struct type", h.name, m.typeString(v.Type()))
		return nil
	}
	if _, ok := named.Underlying().(*types.Struct); !ok {
		fail(pos, "message parameter of handler %s has type %s, which is not a struct", h.name, m.typeString(v.Type()))
		return nil
	}
	if named.TypeArgs().Len() > 0 {
		fail(pos, "message parameter of handler %s has the generic type %s; want a plain struct type", h.name, m.typeString(v.Type()))
		return nil
	}
	if msg := m.messageOf(named); msg != nil && msg.marker.Stream != h.marker.Stream {
		fail(h.marker.KeyPos["stream"], "stream=%s, but handler %s takes %s, a //kinesis:message of stream %s", h.marker.Stream, h.name, msg.name, msg.marker.Stream)
	}
	return named
}

// messageOf returns the //kinesis:message of this package that t is, or nil.
func (m *pkgModel) messageOf(t types.Type) *message {
	named, ok := types.Unalias(t).(*types.Named)
	if !ok || named.Obj().Pkg() != m.pkg.Types {
		return nil
	}
	return m.byName[named.Obj().Name()]
}

func (m *pkgModel) checkExtraParams(h *handler, params *types.Tuple, fail func(token.Position, string, ...any)) {
	for i := 2; i < params.Len(); i++ {
		v := params.At(i)
		pos := m.pkg.Fset.Position(v.Pos())
		t := v.Type()
		last := paramHeaders
		if len(h.params) > 0 {
			last = h.params[len(h.params)-1]
		}
		switch {
		case isNamed(t, runtimePath, "Delivery"):
			if i != params.Len()-1 {
				fail(pos, "runtime.Delivery must be the last parameter of handler %s", h.name)
			}
			h.params = append(h.params, paramDelivery)
		case isNamed(t, runtimePath, "Publisher"):
			if len(h.params) > 0 && last == paramDelivery {
				break // reported by the Delivery case
			}
			x := types.Unalias(t).(*types.Named).TypeArgs().At(0)
			msg := m.messageOf(x)
			if msg == nil {
				fail(pos, "parameter %s of handler %s is runtime.Publisher[%s], but %s is not a //kinesis:message type of this package", v.Name(), h.name, m.typeString(x), m.typeString(x))
				continue
			}
			h.params = append(h.params, paramOut)
			h.outs = append(h.outs, msg)
		case i == 2:
			h.headers = types.Unalias(t)
			h.params = append(h.params, paramHeaders)
			m.checkHeadersParam(h, v, fail)
		default:
			fail(pos, "parameter %s of handler %s has type %s; after ctx and msg a handler takes [headers H,] [runtime.Publisher[X], ...] [runtime.Delivery], in that order", v.Name(), h.name, m.typeString(t))
		}
	}
}

func (m *pkgModel) checkHeadersParam(h *handler, v *types.Var, fail func(token.Position, string, ...any)) {
	pos := m.pkg.Fset.Position(v.Pos())
	t := types.Unalias(v.Type())
	named, ok := t.(*types.Named)
	isContract := ok && named.Obj().Pkg() == m.pkg.Types && m.contractOf[named.Obj().Name()] != nil
	if !isContract {
		// A contract of another package: its generated methods are there, or
		// its tags say that they will be once that package is generated.
		dec, _, _ := types.LookupFieldOrMethod(types.NewPointer(t), true, m.pkg.Types, "DecodeHeaders")
		if !ok || (dec == nil && !hasHeaderTags(named)) {
			fail(pos, "parameter %s of handler %s has type %s, which is not a header contract (a struct with `kinesis:\"HEADER\"` field tags) nor a publisher or delivery", v.Name(), h.name, m.typeString(t))
			return
		}
	}
	if h.msg != nil {
		if msg := m.messageOf(h.msg); msg != nil && msg.headers != nil && msg.headers.obj != named.Obj() {
			fail(pos, "handler %s takes headers %s, but //kinesis:message %s declares headers=%s", h.name, m.typeString(t), msg.name, msg.headers.name)
		}
	}
}

// hasHeaderTags reports whether t is a struct with a kinesis field tag, its
// own or one of a struct it embeds.
func hasHeaderTags(t *types.Named) bool {
	return tagsBelow(t, map[*types.Named]bool{})
}

func tagsBelow(t *types.Named, visiting map[*types.Named]bool) bool {
	st, ok := t.Underlying().(*types.Struct)
	if !ok || visiting[t] {
		return false
	}
	visiting[t] = true
	for i := range st.NumFields() {
		if _, tagged, _ := annotations.HeaderTag(st.Tag(i)); tagged {
			return true
		}
		if step, _, ok := embeddedStruct(st.Field(i)); ok && tagsBelow(step.named, visiting) {
			return true
		}
	}
	return false
}

func (m *pkgModel) checkResults(h *handler, sig *types.Signature, pos token.Position, fail func(token.Position, string, ...any)) {
	res := sig.Results()
	want := "runtime.Outcome, error, or with reply a //kinesis:message type Y or (Y, error)"
	var reply types.Type
	switch {
	case res.Len() == 1 && isNamed(res.At(0).Type(), runtimePath, "Outcome"):
		h.result = resultOutcome
	case res.Len() == 1 && isError(res.At(0).Type()):
		h.result = resultError
	case res.Len() == 1:
		h.result, reply = resultReply, res.At(0).Type()
	case res.Len() == 2 && isError(res.At(1).Type()):
		h.result, reply = resultReplyErr, res.At(0).Type()
	default:
		fail(pos, "handler %s must return %s", h.name, want)
		return
	}
	if reply == nil {
		if h.marker.Reply {
			fail(h.marker.KeyPos["reply"], "reply needs handler %s to return a //kinesis:message type Y or (Y, error), not %s", h.name, m.typeString(res.At(0).Type()))
		}
		return
	}
	h.reply = m.messageOf(reply)
	_, isStruct := reply.Underlying().(*types.Struct)
	switch {
	case h.reply == nil && !isStruct:
		fail(pos, "handler %s returns %s; it must return %s", h.name, m.typeString(reply), want)
	case h.reply == nil:
		fail(pos, "handler %s returns %s, which is not a //kinesis:message type of this package; it must return %s", h.name, m.typeString(reply), want)
	case !h.marker.Reply:
		fail(pos, "handler %s returns the message %s; add reply to its //kinesis:subscriber to publish it, or return runtime.Outcome or error", h.name, h.reply.name)
	}
}

func isNamed(t types.Type, pkgPath, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Origin().Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == pkgPath && obj.Name() == name
}

func isError(t types.Type) bool { return types.Identical(t, types.Universe.Lookup("error").Type()) }

// exported upper-cases the first letter of name.
func exported(name string) string {
	r, n := utf8.DecodeRuneInString(name)
	return string(unicode.ToUpper(r)) + name[n:]
}

// unexported lower-cases the leading capitals of name: HTTPServer → httpServer.
func unexported(name string) string {
	runes := []rune(name)
	for i := range runes {
		if !unicode.IsUpper(runes[i]) {
			break
		}
		if i > 0 && i+1 < len(runes) && unicode.IsLower(runes[i+1]) {
			break
		}
		runes[i] = unicode.ToLower(runes[i])
	}
	return strings.Clone(string(runes))
}
