package generatedtest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"go/format"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

var (
	randomSeed  = flag.Uint64("seed", 0, "TestRandomPackages: run this seed only")
	randomCount = flag.Int("random", 16, "TestRandomPackages: how many seeded packages")
)

// TestRandomPackages generates random packages within the marker grammar —
// message types with random field types and embeddings, header contracts of
// the package and of its dependencies, handlers of every accepted shape as
// functions and as methods (also on an alias), and package, import and
// declaration names chosen to collide with the names the generator uses —
// runs the generator on all of them at once and checks that its output is
// gofmt's, that go vet passes, and that a driver that mounts every package
// on the in-process backend sees each handler get its message and headers.
// One module holds every package, so go vet and go build run once. A
// failure names the seeds and prints their sources; -args -seed N runs one,
// -args -random N runs N.
func TestRandomPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a module of random packages")
	}
	seeds := make([]uint64, 0, *randomCount)
	if *randomSeed != 0 {
		seeds = append(seeds, *randomSeed)
	} else {
		for i := range *randomCount {
			seeds = append(seeds, uint64(i+1))
		}
	}
	files := map[string]string{}
	pkgs := map[uint64]*randPkg{}
	var setups []string
	for _, seed := range seeds {
		p := newRandPkg(seed)
		pkgs[seed] = p
		for name, src := range p.files {
			files[name] = src
		}
		files["rt/"+p.dir+".go"] = p.driver()
		setups = append(setups, "setup"+p.dir)
	}
	files["rt/main.go"] = fmt.Sprintf(randDriverMain, strings.Join(setups, ", "))
	for name, src := range files {
		if strings.HasSuffix(name, ".go") {
			out, err := format.Source([]byte(src))
			if err != nil {
				t.Fatalf("the test wrote invalid Go in %s: %v\n%s", name, err, src)
			}
			files[name] = string(out)
		}
	}
	dir := gentest.Module(t, "", files)
	// failed prints the sources of the seeds that out names (all of them
	// when it names none).
	failed := func(what, out string) {
		t.Helper()
		named := map[uint64]bool{}
		for _, m := range regexp.MustCompile(`\bs(\d+)[/.]`).FindAllStringSubmatch(out, -1) {
			if n, err := strconv.ParseUint(m[1], 10, 64); err == nil && pkgs[n] != nil {
				named[n] = true
			}
		}
		if len(named) == 0 {
			named = maps.Collect(func(yield func(uint64, bool) bool) {
				for s := range pkgs {
					yield(s, true)
				}
			})
		}
		var b strings.Builder
		for _, s := range slices.Sorted(maps.Keys(named)) {
			fmt.Fprintf(&b, "\n=== seed %d (go test ./generated_test -run TestRandomPackages -args -seed %d)\n", s, s)
			for _, name := range slices.Sorted(maps.Keys(pkgs[s].files)) {
				content, _ := os.ReadFile(filepath.Join(dir, name))
				fmt.Fprintf(&b, "--- %s\n%s", name, content)
			}
			if out, err := os.ReadFile(filepath.Join(dir, pkgs[s].dir, gen.FileName)); err == nil {
				fmt.Fprintf(&b, "--- %s/%s\n%s", pkgs[s].dir, gen.FileName, out)
			}
		}
		t.Fatalf("%s:\n%s\n%s", what, out, b.String())
	}

	start := time.Now()
	res, err := gen.Generate(gen.Config{Dir: dir, Env: gentest.Env()}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Diagnostics) > 0 {
		var out strings.Builder
		for _, d := range res.Diagnostics {
			out.WriteString(d.String() + "\n")
		}
		failed("the generator refused valid packages", out.String())
	}
	for _, f := range res.Files {
		if err := os.WriteFile(f.Path, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range res.Files {
		if formatted, err := format.Source(f.Content); err != nil || !bytes.Equal(formatted, f.Content) {
			rel, _ := filepath.Rel(dir, f.Path)
			failed("generated file is not gofmt's output", fmt.Sprintf("%s: %v", rel, err))
		}
	}
	generated := time.Since(start)
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, gentest.Env()
		if out, err := cmd.CombinedOutput(); err != nil {
			failed("go "+strings.Join(args, " ")+": "+err.Error(), string(out))
		}
	}
	run("vet", "./...")
	vetted := time.Since(start)
	run("run", "./rt")
	t.Logf("%d packages: generate %v, vet %v, build and run %v", len(seeds), generated.Round(time.Millisecond),
		(vetted - generated).Round(time.Millisecond), (time.Since(start) - vetted).Round(time.Millisecond))
}

// randDriverMain mounts every package, publishes what each setup says and
// waits for every expected call; %s lists the setups.
const randDriverMain = `package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

type call struct {
	H string
	N int
	K string
}

var calls = make(chan call, 10000)

type setup func(b *runtime.Broker, srv *kinesistest.Server) (publish func(context.Context) error, want []call, err error)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	want := map[call]bool{}
	var pubs []func(context.Context) error
	for _, s := range []setup{%s} {
		pub, w, err := s(b, srv)
		if err != nil {
			return err
		}
		pubs = append(pubs, pub)
		for _, c := range w {
			want[c] = true
		}
	}
	if err := b.Connect(ctx); err != nil {
		return err
	}
	defer b.Shutdown(context.Background())
	for _, pub := range pubs {
		if err := pub(ctx); err != nil {
			return err
		}
	}
	for len(want) > 0 {
		select {
		case c := <-calls:
			delete(want, c)
		case <-ctx.Done():
			var missing []string
			for c := range want {
				missing = append(missing, fmt.Sprintf("%%s(N=%%d K=%%q)", c.H, c.N, c.K))
			}
			sort.Strings(missing)
			return fmt.Errorf("handlers not called with their message: %%v", missing)
		}
	}
	return nil
}
`

// clashNames are identifiers the generator uses or has used for imports,
// parameters and locals; packages, imports, declarations and parameters
// take them.
var clashNames = []string{"b", "opts", "h", "dst", "src", "v", "ok", "err", "n", "t", "ctx", "msg", "d", "headers",
	"reply", "errs", "context", "errors", "fmt", "strconv", "time", "runtime", "runtime_", "runtime_2", "orders",
	"service", "events", "s", "x", "errors_", "time_"}

// receiverNames lower-case to clash names (the Mount parameters).
var receiverNames = []string{"Orders", "Service", "Msg", "Ctx", "D", "Headers", "B", "Errs", "Runtime", "Context", "Fmt", "Time", "V"}

type randDep struct {
	dir, path, name string
	meta            bool // declares the header contract Meta
	alias           string
}

type randMsg struct {
	name     string
	stream   string
	headers  string // local contract name, or ""
	handled  bool
	exported bool
}

type randHandler struct {
	name      string
	stream    string
	recv      string // receiver type as declared (may be an alias), or ""
	mountRecv string // the receiver type Mount takes
	msgType   string // as the driver writes it
	msgLocal  *randMsg
	headers   string // as the driver writes it, or ""
}

type randPkg struct {
	r        *rand.Rand
	seed     uint64
	dir      string // s<seed>
	path     string
	name     string
	files    map[string]string
	taken    map[string]bool // package-level names
	imports  map[string]string
	deps     []*randDep
	msgs     []*randMsg
	cons     []string
	handlers []*randHandler
	recvs    []string
}

func (p *randPkg) pick(list []string) string { return list[p.r.IntN(len(list))] }
func (p *randPkg) chance(pct int) bool       { return p.r.IntN(100) < pct }

// declareClashes declares some clash names at package level, in a file
// without imports.
func declareClashes(r *rand.Rand, pkg string, taken map[string]bool, extra []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	for _, name := range append(slices.Clone(clashNames), extra...) {
		if taken[name] || r.IntN(100) >= 35 {
			continue
		}
		taken[name] = true
		switch r.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "var %s = 0\n", name)
		case 1:
			fmt.Fprintf(&b, "const %s = 1\n", name)
		case 2:
			fmt.Fprintf(&b, "type %s int\n", name)
		default:
			fmt.Fprintf(&b, "func %s() {}\n", name)
		}
	}
	return b.String()
}

// importName picks the name under which a file of the package imports
// path: its package name unless a package-level or another import's name
// is in the way, or at random.
func (p *randPkg) importName(path, natural string) string {
	if name, ok := p.imports[path]; ok {
		return name
	}
	used := map[string]bool{}
	for _, n := range p.imports {
		used[n] = true
	}
	name := natural
	for i := 0; p.taken[name] || used[name] || (i == 0 && p.chance(20)); i++ {
		name = fmt.Sprintf("%s%d", natural, i+1)
		if p.chance(50) {
			name = p.pick(clashNames) + strconv.Itoa(i+1)
		}
	}
	p.imports[path] = name
	return name
}

func newRandPkg(seed uint64) *randPkg {
	r := rand.New(rand.NewPCG(seed, 0x6b696e65736973))
	p := &randPkg{r: r, seed: seed, dir: fmt.Sprintf("s%d", seed), files: map[string]string{}, taken: map[string]bool{}, imports: map[string]string{}}
	p.path = "example.com/app/" + p.dir
	p.name = p.pick(append(slices.Clone(clashNames[:21]), "orders", "events", "app"))
	if p.name == "runtime_" || p.name == "runtime_2" {
		p.name = "rt"
	}
	// Dependencies: a named string, a plain struct and maybe a contract.
	for i := range r.IntN(3) {
		d := &randDep{dir: fmt.Sprintf("%s/dep%d", p.dir, i), name: p.pick(clashNames[:21]), meta: p.chance(60)}
		d.path = "example.com/app/" + d.dir
		taken := map[string]bool{"ID": true, "Placed": true, "Meta": true}
		var b strings.Builder
		fmt.Fprintf(&b, "package %s\n\n// ID is a named string.\ntype ID string\n\n// Placed is a plain struct.\ntype Placed struct {\n\tN    int    `json:\"n\"`\n\tNote string `json:\"note\"`\n}\n", d.name)
		if d.meta {
			b.WriteString("\n// Meta is a header contract.\ntype Meta struct {\n\tK     string `kinesis:\"k\"`\n\tExtra ID     `kinesis:\"extra\"`\n\tCount int16  `kinesis:\"count\"`\n}\n")
		}
		p.files[d.dir+"/dep.go"] = b.String()
		p.files[d.dir+"/names.go"] = declareClashes(r, d.name, taken, nil)
		p.deps = append(p.deps, d)
	}
	for _, n := range []string{"Call", "Seen", "Inner", "Level", "Region", "Plain"} {
		p.taken[n] = true
	}
	// Receivers, maybe reached through an alias.
	for range r.IntN(3) {
		name := p.pick(receiverNames)
		if !p.taken[name] {
			p.taken[name] = true
			p.recvs = append(p.recvs, name)
		}
	}
	// Messages and contracts.
	nMsgs := 1 + r.IntN(5)
	for i := range nMsgs {
		m := &randMsg{exported: i == 0 || p.chance(75), stream: fmt.Sprintf("%s.m%d", p.dir, i)}
		m.name = fmt.Sprintf("M%d", i)
		if !m.exported {
			m.name = fmt.Sprintf("m%d", i)
		}
		p.taken[m.name] = true
		p.msgs = append(p.msgs, m)
	}
	for i := range r.IntN(3) {
		c := fmt.Sprintf("C%d", i)
		p.taken[c] = true
		p.cons = append(p.cons, c)
	}
	var extra []string
	for _, rc := range p.recvs {
		extra = append(extra, strings.ToLower(rc[:1])+rc[1:])
	}
	for _, m := range p.msgs {
		extra = append(extra, strings.ToLower(m.name[:1])+m.name[1:]+"Pub")
	}
	p.files[p.dir+"/names.go"] = declareClashes(r, p.name, p.taken, extra)
	p.files[p.dir+"/pkg.go"] = p.source()
	return p
}

// source writes the package's messages, contracts, receivers and handlers.
func (p *randPkg) source() string {
	ctxName := p.importName("context", "context")
	rtName := p.importName("github.com/kinesisgen/kinesisgen/runtime", "runtime")
	var body strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&body, format, args...) }
	timeName := func() string { return p.importName("time", "time") }
	dep := func() *randDep {
		if len(p.deps) == 0 {
			return nil
		}
		d := p.deps[p.r.IntN(len(p.deps))]
		d.alias = p.importName(d.path, d.name)
		return d
	}

	w("var (\n\t_ %s.Context\n\t_ %s.Delivery\n)\n\n", ctxName, rtName)
	w("// Call is what a handler was given.\ntype Call struct {\n\tH string\n\tN int\n\tK string\n}\n\n")
	w("// Seen receives a Call per handler invocation.\nvar Seen = make(chan Call, 1000)\n\n")
	w("// Inner is embedded in some messages.\ntype Inner struct{ I int }\n\n")
	w("// Level and Region are named header types.\ntype Level uint8\n\n// Region is a named string.\ntype Region string\n\n")
	w("// Plain is a struct without a marker.\ntype Plain struct {\n\tN int `json:\"n\"`\n}\n\n")
	w("// Octet is a named byte type.\ntype Octet byte\n\n")
	p.taken["Octet"] = true

	// Contracts.
	for _, c := range p.cons {
		w("// %s is a header contract.\ntype %s struct {\n", c, c)
		if p.chance(60) {
			w("\tK string `kinesis:\"partition-key\"`\n")
		} else {
			w("\tK string `kinesis:\"k\"`\n")
		}
		for j := range p.r.IntN(4) {
			var typ string
			switch p.r.IntN(7) {
			case 0:
				typ = "int32"
			case 1:
				typ = "uint16"
			case 2:
				typ = "bool"
			case 3:
				typ = "Level"
			case 4:
				typ = "Region"
			case 5:
				typ = timeName() + ".Time"
			default:
				if d := dep(); d != nil {
					typ = d.alias + ".ID"
				} else {
					typ = "int64"
				}
			}
			w("\tX%d %s `kinesis:\"x%d\"`\n", j, typ, j)
		}
		w("}\n\n")
	}
	// Messages.
	fieldTypes := []string{"string", "int", "int8", "uint16", "int64", "float64", "bool", "[]byte", "[]Octet", "[2]Octet",
		"*string", "[]string", "map[string]int", "Inner", "*Inner", "TIME", "DEP.ID", "DEP.Placed", "[]Plain"}
	for _, m := range p.msgs {
		if len(p.cons) > 0 && p.chance(40) {
			m.headers = p.pick(p.cons)
		}
		marker := "//kinesis:message stream=" + m.stream
		if m.headers != "" {
			marker += " headers=" + m.headers
		}
		if p.chance(30) {
			marker += " partition_key=" + p.pick(clashNames)
		}
		w("// %s is a message.\n//\n%s\ntype %s struct {\n\tN int `json:\"n\"`\n", m.name, marker, m.name)
		switch p.r.IntN(3) {
		case 0:
			w("\tInner\n")
		case 1:
			w("\t*Inner\n")
		}
		for j := range p.r.IntN(5) {
			typ := p.pick(fieldTypes)
			switch {
			case typ == "TIME":
				typ = timeName() + ".Time"
			case strings.HasPrefix(typ, "DEP."):
				if d := dep(); d != nil {
					typ = d.alias + strings.TrimPrefix(typ, "DEP")
				} else {
					typ = "Region"
				}
			}
			w("\tF%d %s `json:\"f%d,omitempty\"`\n", j, typ, j)
		}
		w("}\n\n")
	}
	// Receivers, and aliases of some.
	recvDecl := map[string]string{} // type a method is declared on → the type Mount takes
	for _, rc := range p.recvs {
		w("// %s has handler methods.\ntype %s struct{ calls int }\n\n", rc, rc)
		recvDecl[rc] = rc
		if p.chance(40) {
			alias := rc + "Alias"
			p.taken[alias] = true
			w("// %s is an alias of %s.\ntype %s = %s\n\n", alias, rc, alias, rc)
			recvDecl[alias] = rc
		}
	}
	recvChoices := slices.Sorted(maps.Keys(recvDecl))
	// Handlers: each local message is handled at most once (its stream is
	// its own); free messages are replies and injected publishers only.
	var free []*randMsg
	for _, m := range p.msgs {
		if m.exported && p.chance(65) {
			m.handled = true
		} else {
			free = append(free, m)
		}
	}
	nh := 0
	addHandler := func(m *randMsg) {
		h := &randHandler{name: fmt.Sprintf("On%d", nh)}
		if p.chance(15) {
			h.name = fmt.Sprintf("on%d", nh) // unexported handlers mount as well
		}
		nh++
		var msgType string
		switch {
		case m != nil:
			h.stream, h.msgLocal, msgType = m.stream, m, m.name
			h.msgType = "P." + m.name
		default:
			h.stream = fmt.Sprintf("%s.h%d", p.dir, nh)
			if len(p.deps) > 0 && p.chance(70) {
				d := dep()
				msgType = d.alias + ".Placed"
				h.msgType = "D" + strconv.Itoa(slices.Index(p.deps, d)) + ".Placed"
			} else {
				msgType, h.msgType = "Plain", "P.Plain"
			}
		}
		// Parameter names: clash names that no import of this file takes.
		var names []string
		for _, n := range clashNames {
			if !slices.Contains(slices.Collect(maps.Values(p.imports)), n) && n != "runtime_2" {
				names = append(names, n)
			}
		}
		p.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		if p.chance(30) {
			names = slices.Repeat([]string{"_"}, len(names))
		}
		params := []string{names[0] + " " + ctxName + ".Context", names[1] + " " + msgType}
		msgVar, hdrVar := names[1], ""
		next := 2
		switch {
		case m != nil && m.headers != "" && p.chance(70):
			h.headers = "P." + m.headers
			hdrVar = names[next]
			params = append(params, names[next]+" "+m.headers)
			next++
		case (m == nil || m.headers == "") && p.chance(50):
			var choices []string
			for _, c := range p.cons {
				choices = append(choices, c+"|P."+c)
			}
			for i, d := range p.deps {
				if d.meta {
					choices = append(choices, "DEP"+strconv.Itoa(i)+"|D"+strconv.Itoa(i)+".Meta")
				}
			}
			if len(choices) == 0 {
				break
			}
			c := p.pick(choices)
			local, drv, _ := strings.Cut(c, "|")
			if strings.HasPrefix(local, "DEP") {
				i, _ := strconv.Atoi(strings.TrimPrefix(local, "DEP"))
				d := p.deps[i]
				d.alias = p.importName(d.path, d.name)
				local = d.alias + ".Meta"
			}
			h.headers = drv
			hdrVar = names[next]
			params = append(params, names[next]+" "+local)
			next++
		}
		for range p.r.IntN(3) {
			o := p.msgs[p.r.IntN(len(p.msgs))]
			t := rtName + ".Publisher[" + o.name + "]"
			if !slices.ContainsFunc(params, func(s string) bool { return strings.HasSuffix(s, " "+t) }) {
				params = append(params, names[next]+" "+t)
				next++
			}
		}
		if p.chance(35) {
			params = append(params, names[next]+" "+rtName+".Delivery")
		}
		// Results; a reply is a free message without headers.
		var replies []*randMsg
		for _, f := range free {
			if f.headers == "" {
				replies = append(replies, f)
			}
		}
		// Options, some of which make the generated file use package time.
		marker := "//kinesis:subscriber stream=" + h.stream
		if p.chance(50) {
			marker += " start_at=horizon"
		} else {
			marker += " start_at=2020-01-02T03:04:05.5Z"
		}
		if p.chance(30) {
			marker += " workers=2"
			if p.chance(50) {
				marker += " by_key"
			}
		}
		if p.chance(30) {
			marker += " batch=50 poll=250ms"
		}
		if p.chance(20) {
			marker += " retries=3"
		}
		var result, ret string
		switch k := p.r.IntN(4); {
		case k == 0:
			result, ret = rtName+".Outcome", rtName+".Ack()"
		case k == 1 || len(replies) == 0:
			result, ret = "error", "nil"
		case k == 2:
			y := replies[p.r.IntN(len(replies))]
			result, ret = y.name, y.name+"{N: -1}"
			marker += " reply"
		default:
			y := replies[p.r.IntN(len(replies))]
			result, ret = "("+y.name+", error)", y.name+"{N: -1}, nil"
			marker += " reply"
			if p.chance(50) {
				marker += " partition_key=" + p.pick(clashNames)
			}
		}
		// The call is recorded only when both parameters are named.
		record := ""
		if msgVar != "_" {
			k := `""`
			if hdrVar != "" && hdrVar != "_" {
				k = hdrVar + ".K"
			} else if h.headers != "" {
				h.headers = "!" + h.headers // taken but not recorded
			}
			record = fmt.Sprintf("\tSeen <- Call{H: %q, N: %s.N, K: %s}\n", h.name, msgVar, k)
		} else {
			h.name = "!" + h.name // not recorded
		}
		recv := ""
		name := strings.TrimPrefix(h.name, "!")
		if len(recvChoices) > 0 && p.chance(60) {
			h.recv = recvChoices[p.r.IntN(len(recvChoices))]
			h.mountRecv = recvDecl[h.recv]
			star := "*"
			if p.chance(30) {
				star = ""
			}
			recv = "(r " + star + h.recv + ") "
			if p.chance(30) {
				recv = "(" + star + h.recv + ") "
			}
		}
		w("// %s handles %s.\n//\n%s\nfunc %s%s(%s) %s {\n%s\treturn %s\n}\n\n", name, h.stream, marker, recv, name, strings.Join(params, ", "), result, record, ret)
		p.handlers = append(p.handlers, h)
	}
	for _, m := range p.msgs {
		if m.handled {
			addHandler(m)
		}
	}
	for range p.r.IntN(3) {
		addHandler(nil)
	}

	var src strings.Builder
	fmt.Fprintf(&src, "// Package %s is random, seed %d.\npackage %s\n\nimport (\n", p.name, p.seed, p.name)
	for _, path := range slices.Sorted(maps.Keys(p.imports)) {
		fmt.Fprintf(&src, "\t%s %q\n", p.imports[path], path)
	}
	src.WriteString(")\n\n")
	src.WriteString(body.String())
	return src.String()
}

// driver is the rt file of the package: it creates the streams, mounts the
// handlers, forwards their calls and publishes one message to each.
func (p *randPkg) driver() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("package main\n\nimport (\n\t\"context\"\n\n\tP %q\n", p.path)
	for i, d := range p.deps {
		w("\tD%d %q\n", i, d.path)
	}
	w("\t\"github.com/kinesisgen/kinesisgen/runtime\"\n\t\"github.com/kinesisgen/kinesisgen/runtime/kinesistest\"\n)\n\n")
	for i := range p.deps {
		w("var _ D%d.ID\n", i)
	}
	w("func setup%s(b *runtime.Broker, srv *kinesistest.Server) (func(context.Context) error, []call, error) {\n", p.dir)
	streams := map[string]bool{}
	for _, m := range p.msgs {
		streams[m.stream] = true
	}
	for _, h := range p.handlers {
		streams[h.stream] = true
	}
	for _, s := range slices.Sorted(maps.Keys(streams)) {
		w("\tif err := srv.AddStream(%q, 1); err != nil {\n\t\treturn nil, nil, err\n\t}\n", s)
	}
	mountRecvs := map[string]bool{}
	for _, h := range p.handlers {
		if h.mountRecv != "" {
			mountRecvs[h.mountRecv] = true
		}
	}
	if len(p.handlers) > 0 {
		args := []string{"b"}
		for _, r := range slices.Sorted(maps.Keys(mountRecvs)) {
			args = append(args, "&P."+r+"{}")
		}
		w("\tif err := P.Mount(%s); err != nil {\n\t\treturn nil, nil, err\n\t}\n", strings.Join(args, ", "))
	}
	w("\tgo func() {\n\t\tfor c := range P.Seen {\n\t\t\tcalls <- call{H: %q + c.H, N: c.N, K: c.K}\n\t\t}\n\t}()\n", p.dir+".")
	w("\tpublish := func(ctx context.Context) error {\n")
	for i, h := range p.handlers {
		n := int(p.seed)*1000 + i + 1
		key := fmt.Sprintf("k%d", n)
		hdr := strings.TrimPrefix(h.headers, "!")
		if hdr == "" && h.msgLocal != nil && h.msgLocal.headers != "" {
			hdr = "P." + h.msgLocal.headers
		}
		msg := fmt.Sprintf("%s{N: %d}", h.msgType, n)
		pub := fmt.Sprintf("runtime.NewPublisher[%s](b, runtime.PublisherSpec{Stream: %q})", h.msgType, h.stream)
		if h.msgLocal != nil {
			pub = "P.New" + h.msgLocal.name + "Publisher(b)"
		}
		send := pub + ".Message(" + msg + ")"
		if hdr != "" {
			send += ".Headers(" + hdr + "{K: " + strconv.Quote(key) + "})"
		}
		w("\t\tif err := %s.Publish(ctx); err != nil {\n\t\t\treturn err\n\t\t}\n", send)
	}
	w("\t\treturn nil\n\t}\n")
	w("\treturn publish, want%s(), nil\n}\n", p.dir)
	w("\nfunc want%s() []call {\n\treturn []call{\n", p.dir)
	for i, h := range p.handlers {
		if strings.HasPrefix(h.name, "!") {
			continue
		}
		n := int(p.seed)*1000 + i + 1
		k := ""
		if h.headers != "" && !strings.HasPrefix(h.headers, "!") {
			k = fmt.Sprintf("k%d", n)
		}
		w("\t\t{H: %q, N: %d, K: %q},\n", p.dir+"."+h.name, n, k)
	}
	w("\t}\n}\n")
	return b.String()
}
