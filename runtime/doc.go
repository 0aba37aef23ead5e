// Package runtime is what kinesisgen's generated code calls: the Broker and
// its lifecycle, typed publishers, subscriptions with their outcomes and
// worker lanes, and the record envelope.
package runtime

// SupportPackageIsVersion1 is referenced by generated code; a generator and a
// runtime that disagree on the generated-code contract fail to compile with
// this name in the error.
const SupportPackageIsVersion1 = true
