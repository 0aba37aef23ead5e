package generatedtest

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/internal/contract"
	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

// compatPrelude starts every package of the compatibility table; a case's
// before and after sources follow it. Line 1 of a case's source is line 10
// of its in.go.
const compatPrelude = `package p

import (
	"context"
	"time"
)

var _ = time.Time{}
var _ context.Context
`

// An order, as most cases start it.
const order = `
//kinesis:message stream=orders
type Order struct {
	ID       int64  ` + "`json:\"id\"`" + `
	Customer string ` + "`json:\"customer\"`" + `
}
`

// Post reads the orders.
const post = `
//kinesis:subscriber stream=orders
func Post(ctx context.Context, o Order) error { return nil }
`

// compatCases are changes to a package, each with the breaking changes the
// check must report for it (positions relative to the package directory,
// in.go), or none for a compatible change.
var compatCases = []struct {
	name          string
	before, after string
	want          []string
}{
	// Breaking: what records already on a stream no longer decode into.
	{
		name:   "message_moved_stream",
		before: order,
		after:  strings.Replace(order, "stream=orders", "stream=orders-v2", 1),
		want:   []string{`in.go:11:19: //kinesis:message Order moved from stream orders to orders-v2: its consumers on orders stop receiving it, and records already on orders are not read by readers of orders-v2`},
	},
	{
		name:   "message_removed",
		before: order + "\n//kinesis:message stream=refunds\ntype Refund struct{ ID int64 }\n",
		after:  order,
		want:   []string{`kinesis.lock.json:11:5: //kinesis:message Refund was removed (or renamed), but records of it stay on stream refunds until they expire`},
	},
	{
		name:   "field_json_name_changed",
		before: order,
		after:  strings.Replace(order, `json:"customer"`, `json:"customer_id"`, 1),
		want:   []string{`in.go:14:2: field Customer of Order: JSON name changed from "customer" to "customer_id"; records already on stream orders carry "customer", which the new type no longer decodes`},
	},
	{
		name:   "field_removed",
		before: order,
		after:  "\n//kinesis:message stream=orders\ntype Order struct {\n\tID int64 `json:\"id\"`\n}\n",
		want:   []string{`in.go:12:6: JSON field "customer" (Go field Customer) was removed from Order; records already on stream orders carry it, and the new type no longer decodes it`},
	},
	{
		name:   "field_string_to_number",
		before: order,
		after:  strings.Replace(order, "Customer string", "Customer int64 ", 1),
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON string to int64: records already on stream orders hold a JSON string, which the new type cannot decode`},
	},
	{
		name:   "field_number_to_string",
		before: order,
		after:  strings.Replace(order, "ID       int64 ", "ID       string", 1),
		want:   []string{`in.go:13:2: field ID of Order (JSON "id") changed from int64 to a JSON string: records already on stream orders hold a JSON integer, which the new type cannot decode`},
	},
	{
		name:   "field_scalar_to_object",
		before: order,
		after:  strings.Replace(order, "Customer string", "Customer Person", 1) + "\ntype Person struct{ Name string }\n",
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON string to Person: records already on stream orders hold a JSON string, which the new type cannot decode`},
	},
	{
		name:   "field_scalar_to_array",
		before: order,
		after:  strings.Replace(order, "Customer string", "Customer []string", 1),
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON string to a JSON array: records already on stream orders hold a JSON string, which the new type cannot decode`},
	},
	{
		name:   "int_slice_to_bytes",
		before: strings.Replace(order, "Customer string", "Customer []int16", 1),
		after:  strings.Replace(order, "Customer string", "Customer []byte", 1),
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON array to []byte: records already on stream orders hold a JSON array, which the new type cannot decode`},
	},
	{
		name:   "field_array_to_scalar",
		before: strings.Replace(order, "Customer string", "Customer []string", 1),
		after:  order,
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON array to a JSON string: records already on stream orders hold a JSON array, which the new type cannot decode`},
	},
	{
		name:   "field_integer_narrowed",
		before: order,
		after:  strings.Replace(order, "ID       int64 ", "ID       int32 ", 1),
		want:   []string{`in.go:13:2: field ID of Order (JSON "id") changed from int64 to int32: records already on stream orders may hold values outside -2147483648..2147483647, which the new type cannot decode`},
	},
	{
		name:   "field_signed_to_unsigned",
		before: order,
		after:  strings.Replace(order, "ID       int64 ", "ID       uint64", 1),
		want:   []string{`in.go:13:2: field ID of Order (JSON "id") changed from int64 to uint64: records already on stream orders may hold values outside 0..18446744073709551615, which the new type cannot decode`},
	},
	{
		name:   "field_float_to_integer",
		before: strings.Replace(order, "ID       int64 ", "ID       float64", 1),
		after:  order,
		want:   []string{`in.go:13:2: field ID of Order (JSON "id") changed from float64 to int64: records already on stream orders hold a JSON number, which the new type cannot decode`},
	},
	{
		name:   "field_float_narrowed",
		before: strings.Replace(order, "ID       int64 ", "ID       float64", 1),
		after:  strings.Replace(order, "ID       int64 ", "ID       float32", 1),
		want:   []string{`in.go:13:2: field ID of Order (JSON "id") changed from float64 to float32: records already on stream orders may hold values beyond float32, which the new type cannot decode`},
	},
	{
		name:   "field_string_to_time",
		before: order,
		after:  strings.Replace(order, "Customer string", "Customer time.Time", 1),
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a JSON string to time.Time: records already on stream orders hold strings that need not be RFC 3339 times`},
	},
	{
		name:   "field_new_required",
		before: order,
		after:  strings.Replace(order, "}\n", "\tTotal int64 `json:\"total\"`\n}\n", 1),
		want:   []string{`in.go:15:2: field Total of Order (JSON "total") is new and required (no omitempty or omitzero): records already on stream orders lack it, so they no longer match the message's schema; make it optional with omitempty or omitzero`},
	},
	{
		name:   "nested_field_changed",
		before: strings.Replace(order, "Customer string", "Customer Person", 1) + "\ntype Person struct{ Age int `json:\"age\"` }\n",
		after:  strings.Replace(order, "Customer string", "Customer Person", 1) + "\ntype Person struct{ Age string `json:\"age\"` }\n",
		want:   []string{`in.go:17:21: field Age of Person (JSON "age") changed from int to a JSON string: records already on stream orders hold a JSON integer, which the new type cannot decode`},
	},
	{
		name:   "slice_element_changed",
		before: strings.Replace(order, "Customer string `json:\"customer\"`", "Lines []int64 `json:\"lines\"`", 1),
		after:  strings.Replace(order, "Customer string `json:\"customer\"`", "Lines []string `json:\"lines\"`", 1),
		want:   []string{`in.go:14:2: the elements of field Lines of Order (JSON "lines") changed from int64 to a JSON string: records already on stream orders hold a JSON integer, which the new type cannot decode`},
	},
	{
		name:   "map_to_struct",
		before: strings.Replace(order, "Customer string", "Customer map[string]string", 1),
		after:  strings.Replace(order, "Customer string", "Customer Person", 1) + "\ntype Person struct{ Name string }\n",
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") changed from a map to the struct Person: records already on stream orders hold keys the struct does not decode`},
	},
	{
		name:   "header_key_lost",
		before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after:  "\ntype Key struct {\n\tCustomer string `kinesis:\"customer\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		want:   []string{`in.go:12:2: header contract Key of message Order renamed its partition-key field Customer to header "customer": publishers no longer key records by it, so the order of a key's records is lost`},
	},
	{
		name:   "header_contract_dropped",
		before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after:  "\n//kinesis:message stream=orders\ntype Order struct{ ID int64 }\n",
		want:   []string{`in.go:11:1: message Order lost its header contract Key, and with it the partition-key field Customer: publishers no longer key records by it, so the order of a key's records is lost`},
	},
	{
		name:   "header_removed",
		before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   string `kinesis:\"region\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after:  "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		want:   []string{`in.go:11:6: header "region" (field Region) was removed from the header contract of message Order; records already on stream orders carry it`},
	},
	{
		name:   "header_type_changed",
		before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   string `kinesis:\"region\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after:  "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   int    `kinesis:\"region\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		want:   []string{`in.go:13:2: header "region" of Key changed from string to int: records already on stream orders carry values the new type cannot decode`},
	},
	{
		name:   "header_renamed",
		before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   string `kinesis:\"region\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after:  "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   string `kinesis:\"zone\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		want:   []string{`in.go:13:2: header field Region of Key renamed from "region" to "zone"; records already on stream orders carry "region", which the new contract no longer decodes`},
	},
	{
		name:   "subscriber_stream_changed",
		before: "\ntype Audit struct{ At time.Time }\n\n//kinesis:subscriber stream=audit\nfunc Record(ctx context.Context, a Audit) error { return nil }\n",
		after:  "\ntype Audit struct{ At time.Time }\n\n//kinesis:subscriber stream=audit-v2\nfunc Record(ctx context.Context, a Audit) error { return nil }\n",
		want:   []string{`in.go:13:22: subscriber Record moved from stream audit to audit-v2: records still arriving on audit are no longer handled`},
	},
	{
		name:   "subscriber_message_changed",
		before: "\ntype Audit struct{ At time.Time }\n\n//kinesis:subscriber stream=audit\nfunc Record(ctx context.Context, a Audit) error { return nil }\n",
		after:  "\ntype Audit struct{ At int64 }\n\n//kinesis:subscriber stream=audit\nfunc Record(ctx context.Context, a Audit) error { return nil }\n",
		want:   []string{`in.go:11:20: field At of Audit (JSON "At") changed from time.Time to int64: records already on stream audit hold a JSON string, which the new type cannot decode`},
	},

	{
		name:   "field_became_required",
		before: strings.Replace(order, `json:"customer"`, `json:"customer,omitempty"`, 1),
		after:  order,
		want:   []string{`in.go:14:2: field Customer of Order (JSON "customer") became required (omitempty or omitzero dropped): records already on stream orders may lack it, so they no longer match the message's schema`},
	},
	{
		name:   "struct_to_map",
		before: strings.Replace(order, "Customer string", "Customer Person", 1) + "\ntype Person struct {\n\tName string `json:\"name\"`\n\tAge  int    `json:\"age\"`\n}\n",
		after:  strings.Replace(order, "Customer string", "Customer map[string]string", 1),
		want:   []string{`in.go:14:2: the values of field Customer of Order (JSON "customer") (once the field "age") changed from int to a JSON string: records already on stream orders hold a JSON integer, which the new type cannot decode`},
	},

	// Compatible: every record already on a stream decodes as before.
	{name: "new_optional_field", before: order, after: strings.Replace(order, "}\n", "\tNote string `json:\"note,omitempty\"`\n\tAt *time.Time `json:\"at,omitzero\"`\n}\n", 1)},
	{name: "new_message", before: order, after: order + "\n//kinesis:message stream=refunds\ntype Refund struct{ ID int64 }\n"},
	{name: "new_subscriber", before: order, after: order + post},
	{name: "subscriber_removed", before: order + post, after: order},
	{name: "integer_widened", before: strings.Replace(order, "ID       int64 ", "ID       int32 ", 1), after: order},
	{name: "integer_to_float", before: order, after: strings.Replace(order, "ID       int64 ", "ID       float64", 1)},
	{name: "field_to_pointer", before: order, after: strings.Replace(order, "Customer string", "Customer *string", 1)},
	{name: "go_field_renamed", before: order, after: strings.Replace(order, "Customer string", "Buyer    string", 1)},
	{name: "type_to_string", before: strings.Replace(order, "Customer string", "Customer time.Time", 1), after: order},
	{name: "header_added", before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tRegion   string `kinesis:\"region\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n"},
	{name: "header_became_string", before: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tCount    int32  `kinesis:\"count\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n",
		after: "\ntype Key struct {\n\tCustomer string `kinesis:\"partition-key\"`\n\tCount    string `kinesis:\"count\"`\n}\n\n//kinesis:message stream=orders headers=Key\ntype Order struct{ ID int64 }\n"},
	// encoding/json decodes an array of numbers into a byte slice too.
	{name: "byte_array_to_bytes", before: strings.Replace(order, "Customer string", "Customer [4]uint8", 1), after: strings.Replace(order, "Customer string", "Customer []byte", 1)},
	{name: "recursive_unchanged", before: "\n//kinesis:message stream=trees\ntype Node struct {\n\tKids []Node `json:\"kids\"`\n}\n",
		after: "\n// Node is a tree.\n//\n//kinesis:message stream=trees\ntype Node struct {\n\tKids []Node `json:\"kids\"`\n\tName string `json:\"name,omitempty\"`\n}\n"},
}

// TestCompat generates each case's before package, puts its lock beside
// the after package and generates that: a breaking change must be refused
// with exactly the diagnostics of the case, and nothing written; a
// compatible one must pass and update the lock.
func TestCompat(t *testing.T) {
	files := map[string]string{}
	// The cases are packages of one run, most of them on stream orders:
	// shared keeps that from being the diagnostic of two packages' types
	// on one stream.
	shared := regexp.MustCompile(`(?m)^//kinesis:message .*$`)
	for _, c := range compatCases {
		files["before/"+c.name+"/in.go"] = shared.ReplaceAllString(compatPrelude+c.before, "$0 shared")
		files["after/"+c.name+"/in.go"] = shared.ReplaceAllString(compatPrelude+c.after, "$0 shared")
	}
	dir := gentest.Module(t, "", files)
	env := gentest.Env()
	before, after := filepath.Join(dir, "before"), filepath.Join(dir, "after")

	res, err := gen.Generate(gen.Config{Dir: before, Env: env}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Diagnostics {
		t.Fatalf("before: %s", d)
	}
	oldLocks := map[string][]byte{}
	for _, f := range res.Contracts {
		if filepath.Base(f.Path) != contract.LockFile {
			continue
		}
		name := filepath.Base(filepath.Dir(f.Path))
		oldLocks[name] = f.Content
		if err := os.WriteFile(filepath.Join(after, name, contract.LockFile), f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	res, err = gen.Generate(gen.Config{Dir: after, Env: env}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 0 || len(res.Contracts) != 0 || len(res.Remove) != 0 {
		t.Errorf("a breaking change must stop the run: %d files, %d contracts, %d removals", len(res.Files), len(res.Contracts), len(res.Remove))
	}
	got := map[string][]string{}
	for _, d := range res.Diagnostics {
		name, rest, _ := strings.Cut(filepath.ToSlash(d.Pos.Filename), "/")
		d.Pos.Filename = rest
		got[name] = append(got[name], d.String())
	}
	var compatible []string
	for _, c := range compatCases {
		t.Run(c.name, func(t *testing.T) {
			if oldLocks[c.name] == nil {
				t.Fatal("the before package has no lock")
			}
			if diff := cmp.Diff(c.want, got[c.name]); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
		if len(c.want) == 0 {
			compatible = append(compatible, "./"+c.name)
		}
	}

	// The compatible changes alone: they pass and their locks record them.
	res, err = gen.Generate(gen.Config{Dir: after, Env: env}, compatible...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Diagnostics {
		t.Errorf("compatible change refused: %s", d)
	}
	updated := map[string]bool{}
	for _, f := range res.Contracts {
		if filepath.Base(f.Path) != contract.LockFile {
			continue
		}
		name := filepath.Base(filepath.Dir(f.Path))
		updated[name] = true
		if bytes.Equal(f.Content, oldLocks[name]) && name != "go_field_renamed" {
			t.Errorf("%s: the lock was not updated", name)
		}
	}
	for _, name := range compatible {
		if !updated[strings.TrimPrefix(name, "./")] {
			t.Errorf("%s: no lock written", name)
		}
	}
	if !slices.Contains(compatible, "./new_optional_field") || len(compatible) < 10 {
		t.Errorf("compatible cases %v", compatible)
	}
}
