package main

// usageNotes follows the flags in kinesisgen -help.
const usageNotes = `
exit codes:
  0  done; with -check, every generated file is up to date
  1  problems in the packages (each printed as path:line:col: message; nothing
     is written), a breaking change to a message (see contracts), a file that
     could not be written, or, with -check, a generated file or lock missing,
     out of date (a unified diff shows what changes) or stale
  2  bad usage

contracts (kinesis.lock.json, -lock, -asyncapi):
  A stream keeps records for a day up to a year, so a consumer deployed today
  reads what yesterday's code wrote. Beside kinesis_gen.go every package keeps
  kinesis.lock.json: for each //kinesis:message its stream, the JSON Schema of
  its payload (as encoding/json writes the type) and its header contract, and
  for each subscriber its stream and message. Commit it. Each run compares the
  code with it; a compatible change is recorded in it, a breaking one is
  printed at the field or marker that broke it and nothing is written.
  Breaking:
    - a message moved to another stream, or removed (or its type renamed);
    - a field's JSON name changed, or the field removed;
    - a field's type changed so old values no longer decode: string <-> number,
      a scalar <-> an object or array, a map <-> a struct, an integer narrowed
      (int64 -> int32, signed -> unsigned), float64 -> float32 or a number ->
      an integer, a string -> time.Time or []byte;
    - a new field without omitempty/omitzero, or one that lost it (old
      records lack it, so they no longer match the schema);
    - a header contract losing or renaming its partition-key field, a header
      removed or changed to a type its old values do not parse as, or the
      headers= contract dropped;
    - a subscriber moved to another stream, or its message type changed as
      above.
  Compatible: a new optional field, message or subscriber, a removed
  subscriber, a wider integer (int32 -> int64), an integer -> a float, a value
  -> a pointer, a renamed Go field that keeps its JSON name, a time.Time or
  []byte -> a string, a header that is new or became a string, and any type
  -> one with its own MarshalJSON (its methods decide).
  Warned about, and written: a message given aggregate (its records become
  KPL aggregates: consumers that do not deaggregate break; the lock records
  it, so a lock written before kinesisgen did warns once too).
  To ship a break on purpose (say, a stream that was drained), run
  kinesisgen -lock: it rewrites the locks from the code, prints each change it
  accepted, and the lock's diff shows it to the reviewer.
  -asyncapi FILE writes an AsyncAPI 3.0 document of the packages: a channel
  per stream, a message per type with its payload and header schemas and doc
  comments, a receive operation per subscriber (marker settings under
  x-kinesis, replies as reply) and a send operation per publisher. Put it in
  the go:generate line (go tool kinesisgen -asyncapi asyncapi.yaml) to keep
  it next to the code; -check -asyncapi FILE fails when it is out of date.
  A FILE given on the command line is relative to the working directory;
  without -asyncapi, a run over several packages (kinesisgen -check ./...
  from the module root, in CI) also writes, or checks, the document each
  package's //go:generate kinesisgen -asyncapi FILE line asks for, in that
  package's directory, as go generate would.

platforms:
  kinesis_gen.go is one file for every GOOS, GOARCH, build tag and cgo
  setting, and the same whatever configuration kinesisgen runs under (it
  loads cgo files with cgo on when a C compiler is there, and without one
  accepts the other files' uses of their names). Markers and kinesis
  tags in a file that only some builds compile (a //go:build line, a name
  ending in _GOOS or _GOARCH, an import of "C") are an error everywhere:
  declare them in a file that every build compiles. Markers in _test.go files
  are an error too (kinesis_gen.go is compiled without them): in a test,
  publish and subscribe with runtime.NewPublisher and runtime.Subscribe.

Mount and receivers:
  kinesis_gen.go has one Mount per package, registering every subscriber of
  the package. Subscribers may be methods: Mount then takes, after b, a
  pointer to one value of each receiver type, sorted by type name and named
  after it. Methods of Service and Ledger give
      func Mount(b *runtime.Broker, ledger *Ledger, service *Service) error
  and a nil receiver is a runtime.ErrInvalid error. A method declared on an
  alias (type Svc = Service) is Service's. A name that the package or an
  import of kinesis_gen.go already uses gets a suffix (orders1, runtime_).
`
