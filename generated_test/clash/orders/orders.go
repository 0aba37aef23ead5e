// Package orders is a dependency of package clash named like the Mount
// parameter of clash's Orders receiver.
package orders

// Placed is a plain struct that clash's Orders.OnPlaced handles.
type Placed struct{ ID int }
