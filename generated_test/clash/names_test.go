package clash

// fmt is declared by the package's tests only: the generated file, compiled
// with them by go test, must import package fmt under another name.
//
//lint:ignore U1000 declared for its name only
var fmt = "tests"
