package gen

import (
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/kinesisgen/kinesisgen/annotations"
)

// emit renders the kinesis_gen.go of one package. Everything is emitted in
// the model's sorted order, so two runs give the same bytes.
func emit(m *pkgModel) (src []byte, err error) {
	defer func() {
		// typeCode's refusal of a package that names() did not see: a bug
		// of the generator, reported as the error of the run.
		if r := recover(); r != nil {
			bug, ok := r.(emitBug)
			if !ok {
				panic(r)
			}
			src, err = nil, errors.New(string(bug))
		}
	}()
	f := jen.NewFilePathName(m.pkg.PkgPath, m.pkg.Name)
	f.HeaderComment(Header[len("// "):])
	f.HeaderComment("Regenerate with go generate (//go:generate go tool kinesisgen) or kinesisgen in this directory.")
	m.names().register(f)
	emitVersionGuard(f)
	for _, msg := range m.messages {
		emitPublisher(f, m, msg)
	}
	for _, c := range m.contracts {
		emitEncodeHeaders(f, m, c)
		emitDecodeHeaders(f, m, c)
	}
	if len(m.subs) > 0 {
		emitMount(f, m)
	}
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		return nil, err
	}
	// jen has formatted the file; only the import grouping is left.
	return groupImports(buf.Bytes()), nil
}

// emitVersionGuard writes
//
//	// This file needs a runtime that supports generated code of version 1.
//	const _ = runtime.SupportPackageIsVersion1
func emitVersionGuard(f *jen.File) {
	f.Comment("This file needs a runtime that supports generated code of version 1;")
	f.Comment("with another runtime it fails to compile on this line.")
	f.Const().Id("_").Op("=").Qual(runtimePath, "SupportPackageIsVersion1")
}

// emitPublisher writes, for //kinesis:message stream=orders partition_key=k on Order,
//
//	// NewOrderPublisher returns a publisher of Order to the stream "orders".
//	func NewOrderPublisher(b *runtime.Broker, opts ...runtime.PublishOption) runtime.Publisher[Order] {
//		return runtime.NewPublisher[Order](b, runtime.PublisherSpec{Stream: "orders", PartitionKey: "k"}, opts...)
//	}
//
// with Aggregate: true in the spec when the marker says aggregate.
func emitPublisher(f *jen.File, m *pkgModel, msg *message) {
	n := m.namer()
	b, opts := n.fresh("b"), n.fresh("opts")
	spec := []jen.Code{field("Stream", jen.Lit(msg.marker.Stream))}
	doc := fmt.Sprintf("%s returns a publisher of %s to the stream %q", msg.publisherFunc, msg.name, msg.marker.Stream)
	if msg.marker.PartitionKey != "" {
		spec = append(spec, field("PartitionKey", jen.Lit(msg.marker.PartitionKey)))
		doc += fmt.Sprintf(", keyed %q when nothing more specific names a key", msg.marker.PartitionKey)
	}
	if msg.marker.Aggregate {
		spec = append(spec, field("Aggregate", jen.True()))
		doc += ", packing messages into KPL-aggregated records per shard"
	}
	f.Comment(doc + ".")
	f.Func().Id(msg.publisherFunc).
		Params(jen.Id(b).Op("*").Qual(runtimePath, "Broker"), jen.Id(opts).Op("...").Qual(runtimePath, "PublishOption")).
		Qual(runtimePath, "Publisher").Types(jen.Id(msg.name)).
		Block(jen.Return(jen.Qual(runtimePath, "NewPublisher").Types(jen.Id(msg.name)).Call(
			jen.Id(b), jen.Qual(runtimePath, "PublisherSpec").Values(spec...), jen.Id(opts).Op("..."))))
}

// emitEncodeHeaders writes, for a contract with Customer string `kinesis:"partition-key"`
// and Count int32 `kinesis:"count"`,
//
//	// EncodeHeaders writes the tagged fields of h into dst; zero values are left out,
//	// except the partition key's, which is always written.
//	func (h ShipmentKey) EncodeHeaders(dst runtime.Headers) {
//		dst["partition-key"] = h.Customer
//		if h.Count != 0 {
//			dst["count"] = strconv.FormatInt(int64(h.Count), 10)
//		}
//	}
func emitEncodeHeaders(f *jen.File, m *pkgModel, c *contract) {
	n := m.namer()
	h, dst := n.fresh("h"), n.fresh("dst")
	var body []jen.Code
	for _, hf := range c.fields {
		field := selector(h, hf.path, len(hf.path)).Dot(hf.fieldName())
		set := func(value jen.Code) jen.Code { return jen.Id(dst).Index(jen.Lit(hf.header)).Op("=").Add(value) }
		// guard wraps what writes the field in a nil check of each pointer
		// embedded on its way: a nil embed sends none of its headers, but
		// the key field's header is still written, empty.
		guard := func(stmt jen.Code) jen.Code {
			for i := len(hf.path) - 1; i >= 0; i-- {
				if !hf.path[i].ptr {
					continue
				}
				g := jen.If(selector(h, hf.path, i+1).Op("!=").Nil()).Block(stmt)
				if hf.header == partitionKeyHeader {
					g = g.Else().Block(set(jen.Lit("")))
				}
				stmt = g
			}
			return stmt
		}
		var cond, value jen.Code
		switch hf.kind {
		case kindString:
			cond = field.Clone().Op("!=").Lit("")
			value = field.Clone()
			if hf.named {
				value = jen.String().Call(field.Clone())
			}
		case kindBool:
			cond, value = field.Clone(), jen.Lit("true")
		case kindInt:
			cond = field.Clone().Op("!=").Lit(0)
			value = jen.Qual("strconv", "FormatInt").Call(jen.Int64().Call(field.Clone()), jen.Lit(10))
		case kindUint:
			cond = field.Clone().Op("!=").Lit(0)
			value = jen.Qual("strconv", "FormatUint").Call(jen.Uint64().Call(field.Clone()), jen.Lit(10))
		case kindTime:
			cond = jen.Op("!").Add(field.Clone()).Dot("IsZero").Call()
			value = field.Clone().Dot("Format").Call(jen.Qual("time", "RFC3339Nano"))
		}
		if hf.header == partitionKeyHeader && hf.kind == kindString {
			// The key field is always written: an empty key is then an error
			// at publish, not a silent fall to a process-unique key.
			body = append(body, guard(set(value)))
			continue
		}
		if hf.header == partitionKeyHeader {
			// A zero number is no key, as an empty string is: written
			// empty, it is the same error at publish, never the key "0".
			body = append(body, guard(jen.If(cond).Block(set(value)).Else().Block(set(jen.Lit("")))))
			continue
		}
		body = append(body, guard(jen.If(cond).Block(set(value))))
	}
	f.Comment("EncodeHeaders writes the tagged fields of h into dst; zero values are left out,")
	f.Comment("except the partition key's, which is always written.")
	f.Func().Params(jen.Id(h).Id(c.name)).Id("EncodeHeaders").
		Params(jen.Id(dst).Qual(runtimePath, "Headers")).Block(body...)
}

// emitDecodeHeaders writes, for the contract above,
//
//	// DecodeHeaders sets the tagged fields of h from src; a missing header leaves its field alone.
//	func (h *ShipmentKey) DecodeHeaders(src runtime.Headers) error {
//		if v, ok := src["partition-key"]; ok {
//			h.Customer = v
//		}
//		if v, ok := src["count"]; ok {
//			n, err := strconv.ParseInt(v, 10, 32)
//			if err != nil {
//				return &runtime.Error{Kind: runtime.ErrDecode, Op: "header count", Err: err}
//			}
//			h.Count = int32(n)
//		}
//		return nil
//	}
func emitDecodeHeaders(f *jen.File, m *pkgModel, c *contract) {
	n := m.namer()
	h, src, v, ok, err := n.fresh("h"), n.fresh("src"), n.fresh("v"), n.fresh("ok"), n.fresh("err")
	num, boolean, stamp := n.fresh("n"), n.fresh("b"), n.fresh("t")
	var body []jen.Code
	for _, hf := range c.fields {
		field := selector(h, hf.path, len(hf.path)).Dot(hf.fieldName())
		fail := jen.If(jen.Id(err).Op("!=").Nil()).Block(jen.Return(runtimeError("ErrDecode", jen.Lit("header "+hf.header), jen.Id(err))))
		x := num
		switch hf.kind {
		case kindBool:
			x = boolean
		case kindTime:
			x = stamp
		}
		// convert renders T(x) when the field's type is not the parsed type.
		convert := func(parsed types.BasicKind) jen.Code {
			if b, isBasic := hf.typ.(*types.Basic); isBasic && b.Kind() == parsed {
				return jen.Id(x)
			}
			return m.typeCode(hf.typ).Call(jen.Id(x))
		}
		var stmts []jen.Code
		switch hf.kind {
		case kindString:
			if hf.named {
				stmts = append(stmts, field.Clone().Op("=").Add(m.typeCode(hf.typ)).Call(jen.Id(v)))
			} else {
				stmts = append(stmts, field.Clone().Op("=").Id(v))
			}
		case kindBool:
			stmts = append(stmts, jen.List(jen.Id(x), jen.Id(err)).Op(":=").Qual("strconv", "ParseBool").Call(jen.Id(v)), fail,
				field.Clone().Op("=").Add(convert(types.Bool)))
		case kindInt:
			stmts = append(stmts, jen.List(jen.Id(x), jen.Id(err)).Op(":=").Qual("strconv", "ParseInt").Call(jen.Id(v), jen.Lit(10), jen.Lit(hf.bits)), fail,
				field.Clone().Op("=").Add(convert(types.Int64)))
		case kindUint:
			stmts = append(stmts, jen.List(jen.Id(x), jen.Id(err)).Op(":=").Qual("strconv", "ParseUint").Call(jen.Id(v), jen.Lit(10), jen.Lit(hf.bits)), fail,
				field.Clone().Op("=").Add(convert(types.Uint64)))
		case kindTime:
			stmts = append(stmts, jen.List(jen.Id(x), jen.Id(err)).Op(":=").Qual("time", "Parse").Call(jen.Qual("time", "RFC3339Nano"), jen.Id(v)), fail,
				field.Clone().Op("=").Id(x))
		}
		// A header of a nil pointer embed allocates it, just before the
		// field is set.
		var alloc []jen.Code
		for i, step := range hf.path {
			if step.ptr {
				at := selector(h, hf.path, i+1)
				alloc = append(alloc, jen.If(at.Clone().Op("==").Nil()).Block(at.Clone().Op("=").Op("&").Add(m.typeCode(step.named)).Values()))
			}
		}
		last := stmts[len(stmts)-1]
		stmts = append(append(stmts[:len(stmts)-1], alloc...), last)
		body = append(body, jen.If(jen.List(jen.Id(v), jen.Id(ok)).Op(":=").Id(src).Index(jen.Lit(hf.header)), jen.Id(ok)).Block(stmts...))
	}
	body = append(body, jen.Return(jen.Nil()))
	f.Comment("DecodeHeaders sets the tagged fields of h from src; a missing header leaves its field")
	f.Comment("alone, and a malformed one is a runtime.ErrDecode error naming the header.")
	f.Func().Params(jen.Id(h).Op("*").Id(c.name)).Id("DecodeHeaders").
		Params(jen.Id(src).Qual(runtimePath, "Headers")).Error().Block(body...)
}

// emitMount writes, for a function handler post and a method Service.Confirm
// with reply and partition_key=receipts,
//
//	// Mount registers the //kinesis:subscriber handlers of package orders on b.
//	func Mount(b *runtime.Broker, service *Service) error {
//		if service == nil {
//			return &runtime.Error{Kind: runtime.ErrInvalid, Op: "orders.Mount", Err: errors.New("nil *Service")}
//		}
//		entryPub := NewEntryPublisher(b)
//		confirmReplies := NewReceiptPublisher(b, runtime.WithPartitionKey("receipts"))
//		var errs []error
//		if _, err := runtime.Subscribe[Entry](b, "customer-orders.journal", func(ctx context.Context, msg Entry, d runtime.Delivery) runtime.Outcome {
//			reply, err := service.Confirm(ctx, msg)
//			return runtime.ReplyOutcome(ctx, confirmReplies, reply, err)
//		}, runtime.CreateIfMissing(1), runtime.HandlerName("orders.Service.Confirm")); err != nil {
//			errs = append(errs, fmt.Errorf("orders.Service.Confirm: %w", err))
//		}
//		...
//		return errors.Join(errs...)
//	}
func emitMount(f *jen.File, m *pkgModel) {
	n := m.namer()
	b := n.fresh("b")
	params := []jen.Code{jen.Id(b).Op("*").Qual(runtimePath, "Broker")}
	recvNames := map[*receiver]string{}
	var body []jen.Code
	for _, r := range m.receivers {
		name := n.fresh(unexported(r.obj.Name()))
		recvNames[r] = name
		params = append(params, jen.Id(name).Op("*").Id(r.obj.Name()))
		body = append(body, jen.If(jen.Id(name).Op("==").Nil()).Block(jen.Return(
			runtimeError("ErrInvalid", jen.Lit(m.pkg.Name+".Mount"), jen.Qual("errors", "New").Call(jen.Lit("nil *"+r.obj.Name()))))))
	}
	// The injected publishers, one per message type, made once.
	outVars := map[*message]string{}
	for _, msg := range m.messages {
		if used(m, msg) {
			outVars[msg] = n.fresh(unexported(msg.name) + "Pub")
			body = append(body, jen.Id(outVars[msg]).Op(":=").Id(msg.publisherFunc).Call(jen.Id(b)))
		}
	}
	// Reply publishers keyed at the mount site, one per handler that names a key.
	replyVars := map[*handler]string{}
	for _, h := range m.subs {
		if h.reply != nil && h.marker.PartitionKey != "" {
			replyVars[h] = n.fresh(unexported(h.name) + "Replies")
			body = append(body, jen.Id(replyVars[h]).Op(":=").Id(h.reply.publisherFunc).Call(jen.Id(b),
				jen.Qual(runtimePath, "WithPartitionKey").Call(jen.Lit(h.marker.PartitionKey))))
		} else if h.reply != nil {
			replyVars[h] = outVars[h.reply]
		}
	}
	errs := n.fresh("errs")
	body = append(body, jen.Var().Id(errs).Index().Error())
	for _, h := range m.subs {
		body = append(body, subscribeCall(m, n, h, b, errs, recvNames, outVars, replyVars))
	}
	body = append(body, jen.Return(jen.Qual("errors", "Join").Call(jen.Id(errs).Op("..."))))
	f.Comment(fmt.Sprintf("Mount registers the //kinesis:subscriber handlers of package %s on b; each", m.pkg.Name))
	f.Comment("starts when b connects (at once if it is connected). The error joins those")
	f.Comment("of every handler that could not be registered, each prefixed with its name.")
	f.Func().Id("Mount").Params(params...).Error().Block(body...)
}

// used reports whether Mount needs the plain publisher of msg.
func used(m *pkgModel, msg *message) bool {
	for _, h := range m.subs {
		for _, o := range h.outs {
			if o == msg {
				return true
			}
		}
		if h.reply == msg && h.marker.PartitionKey == "" {
			return true
		}
	}
	return false
}

// subscribeCall is the runtime.Subscribe of one handler, its result mapped
// to an outcome, and its error collected.
func subscribeCall(m *pkgModel, n *namer, h *handler, b, errs string, recvNames map[*receiver]string, outVars map[*message]string, replyVars map[*handler]string) jen.Code {
	ln := n.child()
	ctx, msg, d := ln.fresh("ctx"), ln.fresh("msg"), ln.fresh("d")
	var inner []jen.Code
	args := []jen.Code{jen.Id(ctx), jen.Id(msg)}
	outs := h.outs
	for _, p := range h.params {
		switch p {
		case paramHeaders:
			hv, err := ln.fresh("headers"), ln.fresh("err")
			inner = append(inner,
				jen.Var().Id(hv).Add(m.typeCode(h.headers)),
				jen.If(jen.Id(err).Op(":=").Id(hv).Dot("DecodeHeaders").Call(jen.Id(d).Dot("Headers").Call()), jen.Id(err).Op("!=").Nil()).
					Block(jen.Return(jen.Qual(runtimePath, "Reject").Call(jen.Id(err)))))
			args = append(args, jen.Id(hv))
		case paramOut:
			args = append(args, jen.Id(outVars[outs[0]]))
			outs = outs[1:]
		case paramDelivery:
			args = append(args, jen.Id(d))
		}
	}
	var fn *jen.Statement
	if h.recv != nil {
		fn = jen.Id(recvNames[h.recv]).Dot(h.name)
	} else {
		fn = jen.Id(h.name)
	}
	call := fn.Call(args...)
	switch h.result {
	case resultOutcome:
		inner = append(inner, jen.Return(call))
	case resultError:
		inner = append(inner, jen.Return(jen.Qual(runtimePath, "OutcomeOf").Call(call)))
	case resultReply:
		reply := ln.fresh("reply")
		inner = append(inner, jen.Id(reply).Op(":=").Add(call),
			jen.Return(jen.Qual(runtimePath, "ReplyOutcome").Call(jen.Id(ctx), jen.Id(replyVars[h]), jen.Id(reply), jen.Nil())))
	case resultReplyErr:
		reply, err := ln.fresh("reply"), ln.fresh("err")
		inner = append(inner, jen.List(jen.Id(reply), jen.Id(err)).Op(":=").Add(call),
			jen.Return(jen.Qual(runtimePath, "ReplyOutcome").Call(jen.Id(ctx), jen.Id(replyVars[h]), jen.Id(reply), jen.Id(err))))
	}
	handler := jen.Func().Params(jen.Id(ctx).Qual("context", "Context"), jen.Id(msg).Add(m.typeCode(h.msg)), jen.Id(d).Qual(runtimePath, "Delivery")).
		Qual(runtimePath, "Outcome").Block(inner...)

	name := m.pkg.Name + "." + h.qualified()
	callArgs := []jen.Code{jen.Id(b), jen.Lit(h.marker.Stream), handler}
	callArgs = append(callArgs, subscribeOptions(h, name)...)
	err := n.child().fresh("err")
	return jen.If(
		jen.List(jen.Id("_"), jen.Id(err)).Op(":=").Qual(runtimePath, "Subscribe").Types(m.typeCode(h.msg)).Call(callArgs...),
		jen.Id(err).Op("!=").Nil(),
	).Block(jen.Id(errs).Op("=").Append(jen.Id(errs), jen.Qual("fmt", "Errorf").Call(jen.Lit(name+": %w"), jen.Id(err))))
}

// subscribeOptions turns the marker's keys into runtime options, in the
// order of the marker grammar.
func subscribeOptions(h *handler, name string) []jen.Code {
	mk := h.marker
	opt := func(fn string, args ...jen.Code) jen.Code { return jen.Qual(runtimePath, fn).Call(args...) }
	var opts []jen.Code
	switch {
	case mk.CreateIfMissing.OnDemand:
		opts = append(opts, opt("CreateOnDemandIfMissing"))
	case mk.CreateIfMissing.Shards != 0:
		opts = append(opts, opt("CreateIfMissing", jen.Lit(int(mk.CreateIfMissing.Shards))))
	}
	if mk.MaxRecordSize != 0 {
		opts = append(opts, opt("MaxRecordSizeKiB", jen.Lit(int(mk.MaxRecordSize))))
	}
	if mk.Workers != 0 {
		opts = append(opts, opt("Workers", jen.Lit(mk.Workers)))
	}
	if mk.ByKey {
		opts = append(opts, opt("ByKey"))
	}
	switch mk.StartAt.Kind {
	case annotations.StartHorizon:
		opts = append(opts, opt("StartAt", opt("Horizon")))
	case annotations.StartLatest:
		opts = append(opts, opt("StartAt", opt("Latest")))
	case annotations.StartAtTime:
		t := mk.StartAt.Time
		// time.Date(...) in UTC keeps the instant and needs no parsing at run time.
		u := t.UTC()
		opts = append(opts, opt("StartAt", opt("AtTime", jen.Qual("time", "Date").Call(
			jen.Lit(u.Year()), jen.Qual("time", u.Month().String()), jen.Lit(u.Day()), jen.Lit(u.Hour()), jen.Lit(u.Minute()),
			jen.Lit(u.Second()), jen.Lit(u.Nanosecond()), jen.Qual("time", "UTC")))))
	}
	if mk.Batch != 0 {
		opts = append(opts, opt("BatchSize", jen.Lit(int(mk.Batch))))
	}
	if mk.Poll != 0 {
		opts = append(opts, opt("PollInterval", durationCode(mk.Poll)))
	}
	if mk.Fanout != "" {
		opts = append(opts, opt("FanOut", jen.Lit(mk.Fanout)))
	}
	if mk.Queue != "" {
		opts = append(opts, opt("Queue", jen.Lit(mk.Queue)))
	}
	if mk.Visibility != 0 {
		opts = append(opts, opt("Visibility", durationCode(mk.Visibility)))
	}
	if mk.MaxReceives != 0 {
		opts = append(opts, opt("MaxReceives", jen.Lit(mk.MaxReceives)))
	}
	if mk.Retries != nil {
		opts = append(opts, opt("MaxRetries", jen.Lit(*mk.Retries)))
	}
	switch mk.Retry {
	case annotations.RetryInPlace:
		opts = append(opts, opt("RetryInPlace"))
	case annotations.RetryTip:
		opts = append(opts, opt("RetryAtTip"))
	}
	if mk.DeadLetter != "" {
		opts = append(opts, opt("DeadLetter", jen.Lit(mk.DeadLetter)))
	}
	opts = append(opts, opt("HandlerName", jen.Lit(name)))
	return opts
}

// emitBug is a panic of emit that Generate returns as its error.
type emitBug string

// typeCode renders a type; types of the package itself render bare.
func (m *pkgModel) typeCode(t types.Type) *jen.Statement {
	switch t := types.Unalias(t).(type) {
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return jen.Id(obj.Name())
		}
		if _, ok := m.names().imports[obj.Pkg().Path()]; !ok && obj.Pkg() != m.pkg.Types {
			// typePackages must have seen it, or jen would name the import.
			panic(emitBug("no import name for " + obj.Pkg().Path()))
		}
		return jen.Qual(obj.Pkg().Path(), obj.Name())
	case *types.Basic:
		return jen.Id(t.Name())
	case *types.Pointer:
		return jen.Op("*").Add(m.typeCode(t.Elem()))
	}
	panic("kinesisgen: no code for type " + t.String())
}

// namer hands out local names that shadow nothing the generated code refers to.
type namer struct {
	reserved map[string]bool // the package's names; shared, read only
	taken    map[string]bool // names given out in this scope and its parents
}

// namer returns a namer that avoids every package-level name of the package,
// the names the generated file declares, and the names of its imports.
func (m *pkgModel) namer() *namer {
	return &namer{reserved: m.names().reserved, taken: map[string]bool{}}
}

func (n *namer) fresh(base string) string {
	name := base
	for i := 1; n.reserved[name] || n.taken[name] || token.IsKeyword(name) || types.Universe.Lookup(name) != nil; i++ {
		name = base + strconv.Itoa(i)
	}
	n.taken[name] = true
	return name
}

// child is a namer for a nested scope: it avoids every name given so far.
func (n *namer) child() *namer {
	return &namer{reserved: n.reserved, taken: maps.Clone(n.taken)}
}

// groupImports puts the standard library imports of jen's single sorted
// import block first and the others after a blank line, as goimports does.
// Both groups stay sorted, so the result is still gofmt's output.
func groupImports(src []byte) []byte {
	s := string(src)
	start := strings.Index(s, "\nimport (\n")
	if start < 0 {
		return src
	}
	start += len("\nimport (\n")
	end := start + strings.Index(s[start:], "\n)\n")
	var std, other []string
	for _, line := range strings.Split(s[start:end], "\n") {
		path := line[strings.IndexByte(line, '"')+1:]
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			other = append(other, line)
		} else {
			std = append(std, line)
		}
	}
	if len(std) == 0 || len(other) == 0 {
		return src
	}
	return []byte(s[:start] + strings.Join(std, "\n") + "\n\n" + strings.Join(other, "\n") + s[end:])
}

// selector renders recv.S1.S2...Sn for the first n embedded steps of path.
func selector(recv string, path []embedStep, n int) *jen.Statement {
	sel := jen.Id(recv)
	for _, s := range path[:n] {
		sel = sel.Dot(s.name)
	}
	return sel
}

// field renders "Name: value" in a composite literal, in the order given.
func field(name string, value jen.Code) jen.Code { return jen.Id(name).Op(":").Add(value) }

// runtimeError renders &runtime.Error{Kind: runtime.KIND, Op: op, Err: err}.
func runtimeError(kind string, op, err jen.Code) jen.Code {
	return jen.Op("&").Qual(runtimePath, "Error").Values(field("Kind", jen.Qual(runtimePath, kind)), field("Op", op), field("Err", err))
}

// durationCode renders d in its largest exact unit: 1500 * time.Millisecond.
func durationCode(d time.Duration) jen.Code {
	units := []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"}}
	for _, u := range units {
		if d%u.d == 0 {
			return jen.Lit(int(d/u.d)).Op("*").Qual("time", u.name)
		}
	}
	return jen.Lit(int(d)).Op("*").Qual("time", "Nanosecond")
}
