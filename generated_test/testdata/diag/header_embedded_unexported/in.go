package p

import "github.com/kinesisgen/kinesisgen/generated_test/testdata/diag/header_embedded_unexported/dep"

// Hdr embeds dep.Base: Tenant is a header of Hdr, secret cannot be.
type Hdr struct {
	dep.Base
	Customer string `kinesis:"partition-key"`
}
