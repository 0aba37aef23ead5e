package dep

// Base has a header field that other packages cannot set.
type Base struct {
	Tenant string `kinesis:"tenant"`
	secret string `kinesis:"secret"`
}

// Secret reads the unexported field.
func (b Base) Secret() string { return b.secret }
