package main

// usageNotes follows the flags in kinesisgen -help.
const usageNotes = `
exit codes:
  0  done; with -check, every generated file is up to date
  1  problems in the packages (each printed as path:line:col: message; nothing
     is written), a file that could not be written, or, with -check, a
     generated file missing, out of date (a unified diff shows what changes)
     or stale
  2  bad usage

Mount and receivers:
  kinesis_gen.go has one Mount per package, registering every subscriber of
  the package. Subscribers may be methods: Mount then takes, after b, a
  pointer to one value of each receiver type, sorted by type name and named
  after it. Methods of Service and Ledger give
      func Mount(b *runtime.Broker, ledger *Ledger, service *Service) error
  and a nil receiver is a runtime.ErrInvalid error.
`
