// Package events is a dependency of package clash, which imports it as ev
// because it declares events itself.
package events

// Shipped is a plain struct that clash's OnShipped handles.
type Shipped struct{ ID int }
