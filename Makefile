# Koord-Queue developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
export KOORD_QUEUE_CACHE ?= $(HOME)/.cache/koord-queue
# The checkout being built: the build scripts that embed the git revision
# rerun when it changes (checkouts sharing a target directory, as CI's).
export KOORD_QUEUE_SOURCE_DIR := $(CURDIR)

.PHONY: help provision crds build lint test cli cluster run bench-e2e bench-chaos bench-fairness bench-memory provision-kueue bench-kueue bench-kueue-perf images image-binaries push simulate

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

provision: ## Build/fetch the local control plane into $(KOORD_QUEUE_CACHE) (idempotent)
	@tests/provision/provision.sh >/dev/null

crds: ## Regenerate the CRD manifests in the chart from the Rust types
	$(CARGO) run -q -p koord-queue-api --bin crdgen

build: ## Build every crate
	$(CARGO) build --workspace --all-targets

lint: ## rustfmt and clippy (warnings are errors)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: provision ## Provision what is missing, then run every test of the workspace
	$(CARGO) test --workspace

cli: ## The kubectl plugin kubectl-koord_queue: a static release binary, its archive per platform and the krew manifest, into <target dir>/cli
	@CARGO=$(CARGO) cli/package.sh

images: ## Build the four images as OCI archives into <target dir>/images (buildah, podman or docker; installs buildah when none works)
	@CARGO=$(CARGO) images/build.sh

image-binaries: ## Only the static binaries of the images, into <target dir>/images/context
	@CARGO=$(CARGO) images/build.sh binaries

push: ## Push the images to $(REGISTRY) (REGISTRY=registry.example.com/platform; TLS_VERIFY=false for plain HTTP)
	@REGISTRY=$(REGISTRY) images/push.sh

cluster: provision ## Run a local control plane (tier 2, 3 kwok nodes) until Ctrl-C
	$(CARGO) run -q -p koord-queue-tests --bin local-cluster

SCALE ?= 15k
BENCH_OUT ?= docs/bench
bench-e2e: provision ## End-to-end benchmark in Kueue's baseline shape (SCALE=15k; writes $(BENCH_OUT)/e2e-$(SCALE).json/.svg)
	$(CARGO) run --release -q -p koord-queue-bench --bin bench-e2e -- --scale $(SCALE) --out-dir $(BENCH_OUT) $(BENCH_ARGS)

bench-chaos: provision ## The baseline shape with faults: 2 scheduler + 2 webhook processes (SCALE=15k; writes $(BENCH_OUT)/chaos-$(SCALE).json)
	$(CARGO) build --release -q -p koord-queue-webhook -p koord-queue-scheduler
	$(CARGO) run --release -q -p koord-queue-bench --bin bench-e2e -- --phases chaos --scale $(SCALE) --out-dir $(BENCH_OUT) $(BENCH_ARGS)

bench-fairness: provision ## Fair sharing of borrowed capacity: 3 siblings, weights 1:1:2, off then on (writes $(BENCH_OUT)/fairness.json/.svg; BENCH_ARGS="--fair-sharing on")
	$(CARGO) run --release -q -p koord-queue-bench --bin bench-e2e -- --phases fairness --out-dir $(BENCH_OUT) $(BENCH_ARGS)

# A trace replayed against cluster objects in virtual time (docs/simulate.md);
# without OBJECTS and TRACE, the worked example there (two weights compared).
SIM_OUT ?= .local/simulate
simulate: ## Replay a trace against cluster objects in virtual time (OBJECTS=cluster.yaml TRACE=trace.jsonl; default: docs/simulate.md's example, two configurations compared; writes $(SIM_OUT)/report.json/.html)
	@mkdir -p $(SIM_OUT)
	@if [ -n "$(OBJECTS)" ]; then \
		$(CARGO) run --release -q -p koord-queue-sim --bin koord-queue-simulate -- run --objects $(OBJECTS) --trace $(TRACE) --out $(SIM_OUT)/report.json --html $(SIM_OUT)/report.html $(SIM_ARGS); \
	else \
		$(CARGO) run --release -q -p koord-queue-sim --bin koord-queue-simulate -- run --compare sim/examples/fair-equal.yaml sim/examples/fair-weighted.yaml --trace sim/examples/fair-trace.jsonl --by quota --out $(SIM_OUT)/report.json --html $(SIM_OUT)/report.html $(SIM_ARGS); \
	fi

provision-kueue: provision ## Build Kueue v0.17.0 (manager, minimalkueue, perf runner) into $(KOORD_QUEUE_CACHE) for the comparison (cold: minutes; never run by test/CI)
	@bench/provision/kueue.sh >/dev/null

bench-kueue: provision-kueue ## The same job stream against Koord-Queue, then Kueue v0.17.0, in one run (SCALE=15k; writes $(BENCH_OUT)/kueue-$(SCALE).json/.svg)
	$(CARGO) build --release -q -p koord-queue-webhook -p koord-queue-scheduler
	$(CARGO) run --release -q -p koord-queue-bench --bin bench-e2e -- --phases kueue --scale $(SCALE) --out-dir $(BENCH_OUT) $(BENCH_ARGS)

bench-kueue-perf: provision-kueue ## Kueue's own scheduler perf test (baseline, 15,000 workloads) on this machine (writes $(KOORD_QUEUE_CACHE)/kueue-perf-out)
	bench/provision/kueue-perf.sh

bench-memory: provision ## Scheduler process RSS with 100,000 QueueUnits cached (BENCH_ARGS="--units N --queues N")
	$(CARGO) run --release -q -p koord-queue-bench --bin scheduler-memory -- $(BENCH_ARGS)

run: provision ## Koord-Queue on a local control plane (chart, webhook, scheduler, demo) until Ctrl-C
	$(CARGO) run -q -p koord-queue-tests --bin local-run
