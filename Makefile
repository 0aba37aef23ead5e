GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: demo test test-unit soak test-ui test-cli bench bench-kinesalite lint fmt-check generate check-generated

# The main job: the order service on the in-process Kinesis.
demo:
	$(GO) generate ./examples/orders/...
	$(GO) run ./examples/orders

# Every test: starts kinesalite and dynalite on free loopback ports (installing
# them from the committed lockfile), runs the whole suite under -race with the
# live tests required, stops the servers.
test:
	bash scripts/with-servers.sh $(MAKE) --no-print-directory test-unit

# The fleet simulation and the deterministic simulation (fleettest/dst) run
# in testing/synctest bubbles, which the race detector of Go 1.26 can crash
# on (ThreadSanitizer CHECK failed: golang/go#78156, open), so they run
# without -race; the code they drive runs under -race in runtime and
# runtime/shard. The lease pass's cost against the
# lease count is timed without -race too: the race detector's own cost grows
# faster than the leases. scripts/test-packages.sh runs these, the -race
# packages and bench's beside each other, and ends with every package's
# test time, slowest first (TEST_P: test binaries and builds at once).
test-unit: fmt-check check-generated
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	GO=$(GO) bash scripts/test-packages.sh

# The deterministic simulation (fleettest/dst) on new random seeds of its
# make-test mixes for SOAK (default 10m): prints how many schedules it ran,
# and fails with the first failing seed and its shrunk trace. SOAK_FLAGS
# adds flags (-dst.defects: the defect-finding mixes too; -dst.mix=a,b).
# Then the queue subscribers' fault simulation on QUEUE_SEEDS new seeds
# (default 20000, about two minutes), a failing one named in its test.
SOAK ?= 10m
QUEUE_SEEDS ?= 20000
soak:
	cd fleettest/dst && $(GO) test -count=1 -timeout 0 -run 'TestSoak$$' -dst.soak=$(SOAK) $(SOAK_FLAGS)
	$(GO) test -count=1 -timeout 0 -run 'TestQueueSubscribersUnderFaults$$' ./runtime/ -queuesim.seeds=$(QUEUE_SEEDS) -queuesim.from=$$(date +%s%N)

# The demo's status page (-status) in a real headless browser: installs
# Debian's chromium and chromium-driver when missing (apt-get, as root or
# through sudo), builds and starts the demo, and drives the page over
# WebDriver. make test does not run it.
test-ui:
	bash scripts/ui-browser.sh
	$(GO) vet -tags ui ./examples/orders
	$(GO) test -tags ui -count=1 -timeout 5m -run TestStatusPageInBrowser ./examples/orders

# The AWS CLI against cmd/kinesislocal: installs Debian's awscli when aws is
# missing (apt-get, as root or through sudo), then create-stream,
# put-record, get-shard-iterator, get-records and the rest, over HTTP and
# HTTPS; and boto3's SubscribeToShard when boto3 is there. make test does
# not run it.
test-cli:
	bash scripts/cli-kinesislocal.sh

generate:
	$(GO) generate ./...

# Fails when a committed kinesis_gen.go differs from what the generator writes.
check-generated:
	$(GO) run ./cmd/kinesisgen -check ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# Go benchmarks on the in-process backend (no servers needed).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Side-by-side benchmarks against kinesalite (BENCHMARKS.md has the figures).
bench-kinesalite:
	bash scripts/with-servers.sh sh -c '$(GO) run ./internal/bench/publishbench && cd bench && $(GO) run ./cmd/drain && $(GO) run ./cmd/idle && $(GO) run ./cmd/aggregate'
