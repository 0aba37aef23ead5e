package p

import "context"

// Fake is a message for tests only.
//
//kinesis:message stream=fakes
type Fake struct{ ID int }

// handle has a typo in a key.
//
//kinesis:subscriber stream=fakes wrokers=2
func handle(ctx context.Context, msg Fake) error { return nil }

// typo has a typo in the marker name.
//
//kinesis:subscriberr stream=fakes
func typo(ctx context.Context, msg Fake) error { return nil }
