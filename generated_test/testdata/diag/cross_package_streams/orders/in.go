package orders

// Placed is published to orders.placed.
//
//kinesis:message stream=orders.placed
type Placed struct{ ID int }

// Note shares its stream with audit.Entry, on purpose.
//
//kinesis:message stream=notes shared
type Note struct{ Text string }
