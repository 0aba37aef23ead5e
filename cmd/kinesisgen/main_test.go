package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
	"github.com/kinesisgen/kinesisgen/runtime"
)

const orders = `package orders

import "context"

// Order is an order.
//
//kinesis:message stream=orders
type Order struct{ ID int }

// Post posts an order.
//
//kinesis:subscriber stream=orders workers=2
func Post(ctx context.Context, msg Order) error { return nil }
`

// kinesisgen runs the command in dir and returns its exit code and output.
func kinesisgen(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func useModuleEnv(t *testing.T) {
	for _, kv := range gentest.Env()[len(os.Environ()):] {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

func TestWriteCheckRemove(t *testing.T) {
	useModuleEnv(t)
	// plain has nothing for kinesisgen; broken does not compile but has no
	// marker either, so ./... leaves it to the compiler.
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": orders, "plain/plain.go": "package plain\n",
		"broken/broken.go": "package broken\n\nvar _ = undefinedName\n"})
	genFile := filepath.Join(dir, "orders", gen.FileName)

	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || stderr != "orders/kinesis_gen.go: missing; run go generate\norders/kinesis.lock.json: missing; run go generate\n" {
		t.Errorf("-check before generating: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(genFile); err == nil {
		t.Fatal("-check wrote a file")
	}

	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	first, err := os.ReadFile(genFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(first, []byte(gen.Header+"\n")) || !bytes.Contains(first, []byte("func Mount(b *runtime.Broker) error")) {
		t.Errorf("generated file:\n%s", first)
	}
	if _, err := os.Stat(filepath.Join(dir, "plain", gen.FileName)); err == nil {
		t.Error("a package without markers got a kinesis_gen.go")
	}

	// From the package directory with the default pattern, as go:generate runs it.
	if code, _, stderr := kinesisgen(t, filepath.Join(dir, "orders")); code != 0 || stderr != "" {
		t.Fatalf("generate in the package directory: exit %d, stderr %q", code, stderr)
	}
	second, _ := os.ReadFile(genFile)
	if !bytes.Equal(first, second) {
		t.Error("second run changed the file")
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 0 || stderr != "" {
		t.Errorf("-check when up to date: exit %d, stderr %q", code, stderr)
	}

	if err := os.WriteFile(genFile, append(first, "// edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	// -check names the file and shows what is stale, as a unified diff.
	wantDiff := "orders/kinesis_gen.go: out of date; run go generate\n" +
		"--- orders/kinesis_gen.go (on disk)\n+++ orders/kinesis_gen.go (generated)\n"
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || !strings.HasPrefix(stderr, wantDiff) || !strings.HasSuffix(stderr, "\n-// edited\n") {
		t.Errorf("-check after an edit: exit %d, stderr %q; want %q ... a hunk removing the edit", code, stderr, wantDiff)
	}

	// The last marker goes: the lock still has Order, whose records stay on
	// the stream, so that is a breaking change until -lock accepts it; then
	// the generated file and the lock are removed.
	unmarked := strings.NewReplacer("//kinesis:message stream=orders\n", "", "//kinesis:subscriber stream=orders workers=2\n", "").Replace(orders)
	if err := os.WriteFile(filepath.Join(dir, "orders", "orders.go"), []byte(unmarked), 0o644); err != nil {
		t.Fatal(err)
	}
	removed := "orders/kinesis.lock.json:5:5: //kinesis:message Order was removed (or renamed), but records of it stay on stream orders until they expire\n"
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || stderr != removed {
		t.Errorf("-check with no marker left: exit %d, stderr %q, want %q", code, stderr, removed)
	}
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 1 || stderr != removed {
		t.Errorf("generate with no marker left: exit %d, stderr %q, want %q", code, stderr, removed)
	}
	if _, err := os.Stat(genFile); err != nil {
		t.Error("a refused run removed kinesis_gen.go")
	}
	code, stdout, stderr := kinesisgen(t, dir, "-lock", "-v", "./...")
	if code != 0 || !strings.Contains(stdout, "removed orders/kinesis_gen.go") || !strings.Contains(stdout, "removed orders/kinesis.lock.json") ||
		stderr != "kinesisgen: -lock accepted 1 breaking change(s); review the kinesis.lock.json diff:\n  "+removed {
		t.Errorf("-lock with no marker left: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, f := range []string{genFile, filepath.Join(dir, "orders", "kinesis.lock.json")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("stale %s was not removed", filepath.Base(f))
		}
	}
}

// TestLockRefusesUntilAccepted: a breaking change to a message stops go
// generate and -check with the diagnostic at the field; -lock accepts it,
// saying so, and afterwards the package is up to date again.
func TestLockRefusesUntilAccepted(t *testing.T) {
	useModuleEnv(t)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": orders})
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	lockFile := filepath.Join(dir, "orders", "kinesis.lock.json")
	before, err := os.ReadFile(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(orders, "type Order struct{ ID int }", "type Order struct{ ID string }", 1)
	if err := os.WriteFile(filepath.Join(dir, "orders", "orders.go"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "orders/orders.go:8:20: field ID of Order (JSON \"ID\") changed from int to a JSON string: records already on stream orders hold a JSON integer, which the new type cannot decode\n"
	for _, args := range [][]string{{"./..."}, {"-check", "./..."}} {
		if code, _, stderr := kinesisgen(t, dir, args...); code != 1 || stderr != want {
			t.Errorf("%v: exit %d, stderr %q, want %q", args, code, stderr, want)
		}
	}
	if after, _ := os.ReadFile(lockFile); string(after) != string(before) {
		t.Error("a refused run rewrote the lock")
	}
	if code, _, _ := kinesisgen(t, dir, "-check", "-lock", "./..."); code != 2 {
		t.Errorf("-check -lock: exit %d, want 2 (bad usage)", code)
	}
	if code, _, stderr := kinesisgen(t, dir, "-lock", "./..."); code != 0 || !strings.HasSuffix(stderr, "\n  "+want) {
		t.Errorf("-lock: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 0 || stderr != "" {
		t.Errorf("-check after -lock: exit %d, stderr %q", code, stderr)
	}

	// -asyncapi writes the document; -check -asyncapi compares it.
	if code, _, stderr := kinesisgen(t, dir, "-asyncapi", "api.json", "./..."); code != 0 || stderr != "" {
		t.Fatalf("-asyncapi: exit %d, stderr %q", code, stderr)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "api.json"))
	if err != nil || !strings.HasPrefix(string(doc), "{\n  \"asyncapi\": \"3.0.0\",") || !strings.Contains(string(doc), `"address": "orders"`) {
		t.Errorf("api.json (%v):\n%s", err, doc)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "-asyncapi", "api.json", "./..."); code != 0 || stderr != "" {
		t.Errorf("-check -asyncapi when up to date: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "-asyncapi", "other.yaml", "./..."); code != 1 || stderr != "other.yaml: missing; run go generate\n" {
		t.Errorf("-check -asyncapi of a missing file: exit %d, stderr %q", code, stderr)
	}

	// Markers and kinesis_gen.go deleted by hand: ./... still finds the
	// package by its lock, and the lock still refuses to forget Order.
	unmarked := strings.NewReplacer("//kinesis:message stream=orders\n", "", "//kinesis:subscriber stream=orders workers=2\n", "").Replace(changed)
	if err := os.WriteFile(filepath.Join(dir, "orders", "orders.go"), []byte(unmarked), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "orders", gen.FileName)); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 1 || !strings.Contains(stderr, "//kinesis:message Order was removed") {
		t.Errorf("no marker, no kinesis_gen.go, a lock: exit %d, stderr %q", code, stderr)
	}
}

// A kinesis_gen.go the user wrote by hand, in a package with no marker, is
// the user's: the generator removes only files it wrote (its header on the
// first line), and -check does not call it stale.
func TestHandWrittenKinesisGenIsKept(t *testing.T) {
	useModuleEnv(t)
	own := map[string]string{
		"no header":        "package mine\n\n// Written by hand.\nfunc Hand() int { return 1 }\n",
		"header not first": "package mine\n\n" + gen.Header + "\nfunc Hand() int { return 1 }\n",
	}
	for name, src := range own {
		t.Run(name, func(t *testing.T) {
			dir := gentest.Module(t, "", map[string]string{"orders/orders.go": orders, "mine/mine.go": "package mine\n", "mine/" + gen.FileName: src})
			mine := filepath.Join(dir, "mine", gen.FileName)
			if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || strings.Contains(stderr, "mine/") {
				t.Errorf("-check: exit %d, stderr %q; want only orders/ named", code, stderr)
			}
			if code, stdout, stderr := kinesisgen(t, dir, "-v", "./..."); code != 0 || strings.Contains(stdout, "mine/") {
				t.Errorf("generate: exit %d, stdout %q, stderr %q; want mine/ left alone", code, stdout, stderr)
			}
			if got, err := os.ReadFile(mine); err != nil || string(got) != src {
				t.Fatalf("the hand-written %s after generating: %q, %v; want it unchanged", gen.FileName, got, err)
			}
			if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 0 || stderr != "" {
				t.Errorf("-check after generating: exit %d, stderr %q", code, stderr)
			}
		})
	}
}

func TestDiagnosticsWriteNothing(t *testing.T) {
	useModuleEnv(t)
	bad := strings.Replace(orders, "workers=2", "workers=two", 1)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": bad, "good/good.go": strings.NewReplacer("package orders", "package good", "stream=orders", "stream=good").Replace(orders)})
	code, _, stderr := kinesisgen(t, dir, "./...")
	if want := "orders/orders.go:12:36: workers=two: not a whole number\n"; code != 1 || stderr != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", code, stderr, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "good", gen.FileName)); err == nil {
		t.Error("a file was written although another package has a problem")
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-help"}, &stdout, &stderr); code != 0 {
		t.Errorf("-help exit %d", code)
	}
	for _, want := range []string{"usage: kinesisgen", "-check", "//kinesis:subscriber stream=NAME [create_if_missing=SHARDS|on_demand]", "Workers runs up to N deliveries at once",
		"exit codes:", "  2  bad usage", "func Mount(b *runtime.Broker, ledger *Ledger, service *Service) error",
		"inside a handler, the key of the\n  record being handled", "runtime.RawRecord", "[shared]", "[aggregate]", "[fanout=NAME]", "Fanout reads the stream by enhanced fan-out",
		"-lock", "-asyncapi FILE", "kinesis.lock.json", "a field's JSON name changed", "partition-key field", "kinesisgen -lock: it rewrites the locks"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("-help output lacks %q", want)
		}
	}
	if code := run([]string{"-nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}

// TestCRLFCheckout: a checkout with core.autocrlf=true has every file with
// CRLF line ends, the generated file and the lock included. The generator
// still knows its own file, -check passes, and a run rewrites nothing.
func TestCRLFCheckout(t *testing.T) {
	useModuleEnv(t)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": orders})
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	crlf := map[string][]byte{}
	for _, name := range []string{"orders.go", gen.FileName, "kinesis.lock.json"} {
		p := filepath.Join(dir, "orders", name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		crlf[name] = bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
		if err := os.WriteFile(p, crlf[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 0 || stderr != "" {
		t.Errorf("-check of a CRLF checkout: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Errorf("generate in a CRLF checkout: exit %d, stderr %q", code, stderr)
	}
	for name, want := range crlf {
		if got, _ := os.ReadFile(filepath.Join(dir, "orders", name)); !bytes.Equal(got, want) {
			t.Errorf("%s was rewritten although only its line ends differ", name)
		}
	}
	// A real change is still out of date, and its diff is not every line.
	edited := bytes.Replace(crlf[gen.FileName], []byte("func Mount("), []byte("// edited\r\nfunc Mount("), 1)
	if err := os.WriteFile(filepath.Join(dir, "orders", gen.FileName), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || !strings.Contains(stderr, "\n-// edited\n") || strings.Count(stderr, "\n-") > 2 {
		t.Errorf("-check after an edit of a CRLF file: exit %d, stderr %q", code, stderr)
	}
}

// Issue 32 items 1 and 9: -help states retries='s default (the runtime's
// DefaultRetries) and says which retry= to pick when.
func TestHelpStatesRetriesDefaultAndRetryKinds(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-help exit %d", code)
	}
	out := stdout.String()
	// para is the text of key's entry: the indented lines after its own.
	para := func(key string) string {
		var lines []string
		in := false
		for l := range strings.SplitSeq(out, "\n") {
			switch {
			case l == "  "+key:
				in = true
			case in && strings.HasPrefix(l, "    "):
				lines = append(lines, strings.TrimSpace(l))
			case in:
				return strings.Join(lines, " ")
			}
		}
		t.Fatalf("-help has no %s entry", key)
		return ""
	}
	retries := para("retries=N")
	if want := fmt.Sprintf("default %d", runtime.DefaultRetries); !strings.Contains(retries, want) {
		t.Errorf("retries=N in -help: %q; it does not state %q", retries, want)
	}
	retry := para("retry=tip|in_place")
	for _, want := range []string{"tip (the default)", "in_place", "pick it with by_key when a key's order matters"} {
		if !strings.Contains(retry, want) {
			t.Errorf("retry= in -help: %q; it does not say %q", retry, want)
		}
	}
}

// retry=in_place and retry=tip mount with the runtime's options, and the
// generated code compiles.
func TestRetryKindIsMounted(t *testing.T) {
	useModuleEnv(t)
	src := strings.Replace(orders, "workers=2", "workers=2 by_key retry=in_place retries=5", 1)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": src})
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, "orders", gen.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte("runtime.MaxRetries(5), runtime.RetryInPlace()")) {
		t.Errorf("Mount does not set the in-place retry:\n%s", got)
	}
	gentest.Go(t, dir, "vet", "./...")
}
