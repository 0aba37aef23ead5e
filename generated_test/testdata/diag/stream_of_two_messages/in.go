package p

// Order and Refund share a stream by mistake: a copied marker.
//
//kinesis:message stream=orders
type Order struct{}

//kinesis:message stream=orders
type Refund struct{}

// Created and Deleted share a stream on purpose.
//
//kinesis:message stream=events shared
type Created struct{}

//kinesis:message stream=events shared
type Deleted struct{}

// Paid says shared, Unpaid does not: only Unpaid is reported.
//
//kinesis:message stream=payments shared
type Paid struct{}

//kinesis:message stream=payments
type Unpaid struct{}

// A third type on orders is reported once, and Order is not reported again.
//
//kinesis:message stream=orders
type Return struct{}
