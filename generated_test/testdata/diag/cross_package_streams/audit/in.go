package audit

// Entry shares notes with orders.Note, on purpose.
//
//kinesis:message stream=notes shared
type Entry struct{ Text string }
