package p

// Order is a message of the package.
//
//kinesis:message stream=orders
type Order struct{ ID int }
