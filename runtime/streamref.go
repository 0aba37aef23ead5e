package runtime

import (
	"fmt"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// streamRef is how a call names stream: by StreamARN when it is an ARN
// (another account's stream, through its resource policy), else by
// StreamName. Never both: the service refuses that.
func streamRef(stream string) (name, arn *string) {
	if rules.IsARN(stream) {
		return nil, &stream
	}
	return &stream, nil
}

// checkRegion reports a stream named by the ARN of a region other than
// the connection's client's (when the client's region is known): the
// service would answer that it has no such stream.
func (c *conn) checkRegion(stream string) error {
	if c.region == "" || !rules.IsARN(stream) {
		return nil
	}
	a, err := rules.ParseStreamARN(stream)
	if err != nil {
		return err
	}
	if a.Region != c.region {
		return fmt.Errorf("stream ARN of region %s, but the Kinesis client is of region %s: a stream is reached only through its own region's endpoint", a.Region, c.region)
	}
	return nil
}
