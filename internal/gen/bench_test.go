package gen_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/gen"
	"github.com/kinesisgen/kinesisgen/internal/gen/gentest"
)

// perfPackage is a package of n message types and n subscribers of mixed
// shapes: error results, outcomes with deliveries, injected publishers,
// keyed replies, and a header contract on every tenth message.
func perfPackage(n int) string {
	var b strings.Builder
	b.WriteString("package perf\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/kinesisgen/kinesisgen/runtime\"\n)\n\nvar _ time.Time\n")
	for i := range n {
		next := (i + 1) % n
		if i%10 == 0 {
			fmt.Fprintf(&b, "\n// H%03d is a header contract.\ntype H%03d struct {\n\tKey string `kinesis:\"partition-key\"`\n\tN int64 `kinesis:\"n\"`\n\tAt time.Time `kinesis:\"at\"`\n}\n", i, i)
			fmt.Fprintf(&b, "\n// M%03d is a message.\n//\n//kinesis:message stream=perf.m%03d headers=H%03d\ntype M%03d struct{ ID int }\n", i, i, i, i)
			fmt.Fprintf(&b, "\n// S%03d handles M%03d.\n//\n//kinesis:subscriber stream=perf.m%03d workers=4 by_key\nfunc S%03d(ctx context.Context, msg M%03d, h H%03d) error { return nil }\n", i, i, i, i, i, i)
			continue
		}
		fmt.Fprintf(&b, "\n// M%03d is a message.\n//\n//kinesis:message stream=perf.m%03d\ntype M%03d struct{ ID int }\n", i, i, i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "\n//kinesis:subscriber stream=perf.m%03d retries=2\nfunc S%03d(ctx context.Context, msg M%03d) error { return nil }\n", i, i, i)
		case 1:
			fmt.Fprintf(&b, "\n//kinesis:subscriber stream=perf.m%03d start_at=horizon\nfunc S%03d(ctx context.Context, msg M%03d, d runtime.Delivery) runtime.Outcome { return runtime.Ack() }\n", i, i, i)
		case 2:
			fmt.Fprintf(&b, "\n//kinesis:subscriber stream=perf.m%03d poll=500ms\nfunc S%03d(ctx context.Context, msg M%03d, out runtime.Publisher[M%03d]) runtime.Outcome { return runtime.Ack() }\n", i, i, i, next)
		case 3:
			fmt.Fprintf(&b, "\n//kinesis:subscriber stream=perf.m%03d reply partition_key=k%03d\nfunc S%03d(ctx context.Context, msg M%03d) (M%03d, error) { return M%03d{}, nil }\n", i, i, i, i, next, next)
		}
	}
	return b.String()
}

func perfModule(b *testing.B) string {
	dir := gentest.Module(b, "", map[string]string{"perf/perf.go": perfPackage(200)})
	return filepath.Join(dir, "perf")
}

// BenchmarkGenerate200 runs the pipeline in process on 200 message types and
// 200 subscribers; load-ms is packages.Load, gen-ms everything else
// (collect, validate, emit, format).
func BenchmarkGenerate200(b *testing.B) {
	dir := perfModule(b)
	cfg := gen.Config{Dir: dir, Env: gentest.Env()}
	var load, total time.Duration
	for b.Loop() {
		res, err := gen.Generate(cfg, ".")
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Diagnostics) > 0 || len(res.Files) != 1 {
			b.Fatalf("diagnostics %v, %d files", res.Diagnostics, len(res.Files))
		}
		load += res.Load
		total += res.Total
	}
	n := float64(b.N)
	b.ReportMetric(float64(load.Milliseconds())/n, "load-ms/op")
	b.ReportMetric(float64((total-load).Milliseconds())/n, "gen-ms/op")
	b.ReportMetric(100*float64(load)/float64(total), "load-%")
}

// BenchmarkCommand200 runs the built kinesisgen command on the same package,
// as go generate would: wall time and the command's peak resident memory
// (the go list it starts is a separate process, not counted).
func BenchmarkCommand200(b *testing.B) {
	dir := perfModule(b)
	bin := filepath.Join(b.TempDir(), "kinesisgen")
	build := exec.Command("go", "build", "-o", bin, gentest.ModulePath+"/cmd/kinesisgen")
	build.Dir = gentest.Root(b)
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	var maxRSS int64
	for b.Loop() {
		os.Remove(filepath.Join(dir, gen.FileName))
		cmd := exec.Command(bin, ".")
		cmd.Dir = dir
		cmd.Env = gentest.Env()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kinesisgen: %v\n%s", err, out)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = max(maxRSS, ru.Maxrss)
		}
	}
	b.ReportMetric(float64(maxRSS)/1024, "maxrss-MB")
}
