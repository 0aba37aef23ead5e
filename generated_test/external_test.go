package generatedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

const appMain = `// Command app is an application outside the kinesisgen repository.
package main

GO:GENERATE go tool kinesisgen

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// Order is placed by a customer.
//
//kinesis:message stream=app.orders
type Order struct {
	ID       int
	Customer string
}

// Receipt confirms an order.
//
//kinesis:message stream=app.receipts
type Receipt struct {
	Order    int
	Customer string
}

// Confirm answers every order with a receipt, all under one key.
//
//kinesis:subscriber stream=app.orders create_if_missing=2 workers=2 by_key reply partition_key=receipts start_at=horizon
func Confirm(ctx context.Context, msg Order) (Receipt, error) {
	return Receipt{Order: msg.ID, Customer: msg.Customer}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("app.receipts", 1); err != nil {
		return err
	}
	if err := Mount(b); err != nil {
		return err
	}
	type seen struct {
		r   Receipt
		key string
	}
	receipts := make(chan seen, 3)
	_, err := runtime.Subscribe(b, "app.receipts", func(ctx context.Context, r Receipt, d runtime.Delivery) runtime.Outcome {
		receipts <- seen{r, d.PartitionKey}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	if err != nil {
		return err
	}
	if err := b.Connect(ctx); err != nil {
		return err
	}
	defer b.Shutdown(context.Background())
	orders := NewOrderPublisher(b)
	for i, customer := range []string{"ann", "bob", "cid"} {
		if err := orders.Message(Order{ID: i + 1, Customer: customer}).PartitionKey(customer).Publish(ctx); err != nil {
			return err
		}
	}
	var got []seen
	for len(got) < 3 {
		select {
		case s := <-receipts:
			got = append(got, s)
		case <-ctx.Done():
			return fmt.Errorf("only %d receipts", len(got))
		}
	}
	slices.SortFunc(got, func(a, b seen) int { return a.r.Order - b.r.Order })
	for _, s := range got {
		fmt.Printf("receipt order=%d customer=%s key=%s\n", s.r.Order, s.r.Customer, s.key)
	}
	return nil
}
`

// TestExternalModule is an application repo's workflow: a module outside
// this repository requires it, adds kinesisgen as a go.mod tool (go get
// -tool), runs go
// generate, builds and runs the program on the in-process backend.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and a program")
	}
	// The directive is spelled out here, not in appMain, where go generate
	// would run it in this repository.
	main := strings.Replace(appMain, "GO:GENERATE", "//go:"+"generate", 1)
	dir := gentest.Module(t, "", map[string]string{"main.go": main})
	gentest.Go(t, dir, "get", "-tool", gentest.ModulePath+"/cmd/kinesisgen")
	if gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !strings.Contains(string(gomod), "\ntool "+gentest.ModulePath+"/cmd/kinesisgen\n") {
		t.Fatalf("go get -tool left no tool directive:\n%s", gomod)
	}
	gentest.Go(t, dir, "generate", "./...")
	src, err := os.ReadFile(filepath.Join(dir, gen.FileName))
	if err != nil {
		t.Fatalf("go generate wrote no %s: %v", gen.FileName, err)
	}
	if !strings.HasPrefix(string(src), gen.Header+"\n") {
		t.Errorf("%s does not start with the header:\n%s", gen.FileName, src)
	}
	gentest.Go(t, dir, "vet", "./...")
	gentest.Go(t, dir, "build", "-o", "app", ".")
	cmd := exec.Command(filepath.Join(dir, "app"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("app: %v\n%s", err, out)
	}
	want := "receipt order=1 customer=ann key=receipts\nreceipt order=2 customer=bob key=receipts\nreceipt order=3 customer=cid key=receipts\n"
	if string(out) != want {
		t.Errorf("app printed\n%s\nwant\n%s", out, want)
	}
	// A second go generate leaves the file byte-identical.
	gentest.Go(t, dir, "generate", "./...")
	again, _ := os.ReadFile(filepath.Join(dir, gen.FileName))
	if string(again) != string(src) {
		t.Error("second go generate changed kinesis_gen.go")
	}
}
