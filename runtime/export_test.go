package runtime

import "time"

// FastRetries makes failed entries come back within milliseconds, for
// tests outside the package.
func FastRetries() Option {
	return func(c *config) {
		c.batch.retryBase = time.Millisecond
		c.batch.retryMax = 5 * time.Millisecond
	}
}
