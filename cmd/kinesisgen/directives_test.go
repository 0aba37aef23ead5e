package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

// Issue 32 item 6: a package's //go:generate line asks for an AsyncAPI
// document next to it; kinesisgen -check ./... from the module root checks
// that document where go generate writes it, without a cd per package.
func TestCheckFromTheRootResolvesAsyncAPILikeGoGenerate(t *testing.T) {
	useModuleEnv(t)
	directive := "//go:" + "generate go tool kinesisgen -asyncapi asyncapi.yaml\n"
	src := strings.Replace(orders, "package orders\n", "package orders\n\n"+directive, 1)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": src, "plain/plain.go": "package plain\n"})
	pkg := filepath.Join(dir, "orders")
	// What go generate runs, in the package's directory.
	if code, _, stderr := kinesisgen(t, pkg, "-asyncapi", "asyncapi.yaml"); code != 0 || stderr != "" {
		t.Fatalf("generate in the package: exit %d, stderr %q", code, stderr)
	}
	doc := filepath.Join(pkg, "asyncapi.yaml")
	if _, err := os.Stat(doc); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 0 || stderr != "" {
		t.Fatalf("-check ./... from the root of an up-to-date module: exit %d, stderr %q", code, stderr)
	}
	// The document goes missing: -check from the root says so.
	if err := os.Remove(doc); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := kinesisgen(t, dir, "-check", "./..."); code != 1 || !strings.Contains(stderr, "orders/asyncapi.yaml: missing; run go generate") {
		t.Fatalf("-check ./... from the root without the package's document: exit %d, stderr %q", code, stderr)
	}
	// A run over ./... from the root writes it where go generate would.
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate from the root: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(doc); err != nil {
		t.Fatalf("a run from the root did not write the package's document: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "asyncapi.yaml")); err == nil {
		t.Error("a run from the root wrote asyncapi.yaml in the root")
	}
}

func TestParseDirective(t *testing.T) {
	for _, tt := range []struct {
		line, file string
		patterns   []string
		ok         bool
	}{
		{"//go:" + "generate go tool kinesisgen -asyncapi asyncapi.yaml", "/p/asyncapi.yaml", nil, true},
		{"//go:" + "generate go tool kinesisgen -v -asyncapi=api.json ./...", "/p/api.json", []string{"./..."}, true},
		{"//go:" + "generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi \"my api.yaml\"", "/p/my api.yaml", nil, true},
		{"//go:" + "generate go tool kinesisgen", "", nil, false},
		{"//go:" + "generate stringer -asyncapi x", "", nil, false},
		{"// go:generate go tool kinesisgen -asyncapi a.yaml", "", nil, false},
	} {
		r, ok := parseDirective(tt.line, "/p")
		if ok != tt.ok || r.file != tt.file || strings.Join(r.patterns, " ") != strings.Join(tt.patterns, " ") {
			t.Errorf("parseDirective(%q) = %+v, %v; want file %q, patterns %q, %v", tt.line, r, ok, tt.file, tt.patterns, tt.ok)
		}
	}
}

// Issue 32 item 6: a change in one package can make another package's
// lock out of date (a subscriber of its message); -check says to run go
// generate over every package, since running it in the changed one alone
// leaves the other lock stale.
func TestLockMadeStaleByAnotherPackageSaysGenerateAll(t *testing.T) {
	useModuleEnv(t)
	shop := "package shop\n\n//kinesis:message stream=orders\ntype Order struct{ ID int }\n"
	billing := `package billing

import (
	"context"

	"example.com/app/shop"
)

//kinesis:subscriber stream=orders
func Bill(ctx context.Context, o shop.Order) error { return nil }
`
	dir := gentest.Module(t, "", map[string]string{"shop/shop.go": shop, "billing/billing.go": billing})
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	changed := strings.Replace(shop, "ID int", "ID int; Note string `json:\",omitempty\"`", 1)
	if err := os.WriteFile(filepath.Join(dir, "shop", "shop.go"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := kinesisgen(t, dir, "-check", "./...")
	if code != 1 || !strings.Contains(stderr, "billing/kinesis.lock.json: out of date; run go generate ./...\n") {
		t.Fatalf("-check after a change in shop: exit %d, stderr:\n%s", code, stderr)
	}
}

// Issue 32 item 6: adding aggregate to a message is a compatibility event
// (a consumer that cannot read KPL aggregates breaks): the run warns, at
// the marker, and still writes; the AsyncAPI document says the stream's
// records are KPL aggregates.
func TestAddingAggregateWarnsAndIsDescribed(t *testing.T) {
	useModuleEnv(t)
	dir := gentest.Module(t, "", map[string]string{"orders/orders.go": orders})
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("generate: exit %d, stderr %q", code, stderr)
	}
	src := strings.Replace(orders, "//kinesis:message stream=orders", "//kinesis:message stream=orders aggregate", 1)
	if err := os.WriteFile(filepath.Join(dir, "orders", "orders.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := kinesisgen(t, dir, "-asyncapi", "asyncapi.yaml", "./...")
	if want := "orders/orders.go:7:33: warning: message Order is now published as KPL aggregates"; code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("generate after adding aggregate: exit %d, stderr %q; want exit 0 and %q", code, stderr, want)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "KPL aggregate") {
		t.Errorf("the AsyncAPI document does not say the records are KPL aggregates:\n%s", doc)
	}
	// Once the lock records it, the next run is quiet.
	if code, _, stderr := kinesisgen(t, dir, "./..."); code != 0 || stderr != "" {
		t.Fatalf("second run: exit %d, stderr %q", code, stderr)
	}
}
