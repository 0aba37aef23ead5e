// Package v is named like a local of the generated DecodeHeaders.
package v

// ID is a named string type of a header field.
type ID string
