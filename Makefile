GO ?= go

.PHONY: demo test test-unit bench lint generate check-generated

# The main job: the order service on the in-process Kinesis.
demo:
	$(GO) generate ./examples/orders/...
	$(GO) run ./examples/orders

# Every test: starts kinesalite and dynalite on free loopback ports, runs the
# whole suite under -race with the live tests required, stops the servers.
test:
	bash scripts/with-servers.sh $(MAKE) --no-print-directory test-unit

test-unit: check-generated
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

generate:
	$(GO) generate ./...

check-generated:
	$(GO) run ./cmd/kinesisgen -check ./...

lint:
	@test -z "$$(gofmt -l . | grep -v node_modules)" || (gofmt -l . | grep -v node_modules; exit 1)
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
