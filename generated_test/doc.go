// Package generatedtest holds kinesisgen's scenario tests: the packages below
// it are generator inputs with their committed kinesis_gen.go (golden files,
// compiled and exercised on the in-process backend), and testdata/diag holds
// one directory per diagnostic with its expected stderr.
package generatedtest
