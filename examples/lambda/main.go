package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
)

func main() {
	// The AWS configuration comes from the function's environment (region,
	// role credentials). Nothing connects until the first invocation, and
	// warm invocations reuse the connection.
	h, err := function(runtime.NewBroker())
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(h)
}

// function mounts the service's subscribers on b and returns the Lambda
// handler; the test calls it with a broker on the in-process Kinesis.
func function(b *runtime.Broker) (func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error), error) {
	if err := Mount(b, &Service{}); err != nil {
		return nil, err
	}
	return kinesislambda.Handler(b), nil
}
