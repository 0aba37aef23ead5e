package shard

import "github.com/kinesisgen/kinesisgen/internal/rules"

// streamRef is how a call names stream: by StreamARN when it is an ARN
// (another account's stream, through its resource policy), else by
// StreamName. Never both: the service refuses that.
func streamRef(stream string) (name, arn *string) {
	if rules.IsARN(stream) {
		return nil, &stream
	}
	return &stream, nil
}
