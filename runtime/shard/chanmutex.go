package shard

// chanMutex is a mutex held across remote calls (a pass, a follow of
// handoffs). A sync.Mutex would do in production; this one is a 1-buffered
// channel so that a goroutine waiting on it is durably blocked in a
// testing/synctest bubble, where a sync.Mutex waited on while its holder
// sleeps on the virtual clock (a slow Kinesis or lease-store call) stops
// the bubble's clock: fleettest/dst could not slow the calls made under it.
// Its zero value is not ready: use newChanMutex.
type chanMutex chan struct{}

func newChanMutex() chanMutex { return make(chanMutex, 1) }

func (m chanMutex) Lock()   { m <- struct{}{} }
func (m chanMutex) Unlock() { <-m }
