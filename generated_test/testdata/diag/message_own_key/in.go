package p

// Order's customer does not key its publish.
//
//kinesis:message stream=orders
type Order struct {
	ID       int
	Customer string `kinesis:"partition-key"`
}

// Meta is Ship's header contract.
type Meta struct {
	Source string `kinesis:"source"`
}

// Ship's own tagged field is not sent: its headers are Meta.
//
//kinesis:message stream=ships headers=Meta
type Ship struct {
	Trace string `kinesis:"trace"`
}

// Self is its own header contract, as headers=Self says: no diagnostic.
//
//kinesis:message stream=selves headers=Self
type Self struct {
	Customer string `kinesis:"partition-key"`
}

// Tenant is embedded by Account.
type Tenant struct {
	Name string `kinesis:"tenant"`
}

// Account's embedded tag is not sent either.
//
//kinesis:message stream=accounts
type Account struct {
	Tenant
	ID int
}
