// Package gentest builds throwaway application modules that depend on this
// checkout, for tests that run kinesisgen the way an application repo does.
package gentest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ModulePath is the module the application requires.
const ModulePath = "github.com/kinesisgen/kinesisgen"

// Root returns the directory of this checkout's go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+ModulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("gentest: not inside the kinesisgen checkout")
		}
		dir = parent
	}
}

// Module writes a module example.com/app in a fresh temporary directory,
// outside the checkout: a go.mod that requires this module through a replace
// to the checkout (plus extra go.mod lines, such as a tool directive), the
// checkout's go.sum, and files (path → contents). It returns the directory.
func Module(t testing.TB, extra string, files map[string]string) string {
	t.Helper()
	root := Root(t)
	dir := t.TempDir()
	gomod := "module example.com/app\n\ngo 1.26\n\nrequire " + ModulePath + " v0.0.0\n\nreplace " + ModulePath + " => " + root + "\n"
	if extra != "" {
		gomod += "\n" + extra + "\n"
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.mod"] = gomod
	files["go.sum"] = string(sum)
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Env is the environment for go commands in such a module: requirements are
// completed from the checkout's go.mod (-mod=mod) and the shared module
// cache, never from the network.
func Env() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
}

// Go runs the go command in dir and returns its combined output; a failure
// fails the test with that output.
func Go(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
