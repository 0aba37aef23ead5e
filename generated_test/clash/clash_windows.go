package clash

// errors is declared on Windows only: the generated file, the same on every
// platform, must import package errors under another name everywhere.
//
//lint:ignore U1000 declared for its name only
var errors = "windows"
