# TileSpool: build, test and bench entry points.
#   make deps      Debian packages the build, the tests and the benches need (skipped quickly when present)
#   make build     debug build            make release   release build
#   make run       deps + build, then the daemon on ./spool
#   make test      deps, then the XCTest suite (the last output line is XCTest's summary)
#   make bench     deps, a release build in .build-bench, then bench/run.sh (docs/benchmarks.md)
#   make clean     remove .build and .build-bench
# SWIFT_FLAGS passes options to every swift command, e.g. SWIFT_FLAGS="--scratch-path /tmp/b".

SHELL := /bin/bash
.DEFAULT_GOAL := build

SWIFT ?= swift
SWIFT_FLAGS ?=
DEB_PACKAGES := libcurl4-openssl-dev libssl-dev libsqlite3-dev nginx-light jq python3 mapproxy curl time valgrind
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: deps build release run test bench clean serve-mapdata

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	    dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all present ($(DEB_PACKAGES))"; exit 0; fi; \
	echo "deps: installing$$missing"; \
	if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then $(APT_GET) update; fi; \
	$(APT_GET) install -y $$missing || { $(APT_GET) update && $(APT_GET) install -y $$missing; }

build:
	$(SWIFT) build -c debug $(SWIFT_FLAGS)

release:
	$(SWIFT) build -c release $(SWIFT_FLAGS)

run: deps build
	"$$($(SWIFT) build -c debug $(SWIFT_FLAGS) --show-bin-path)/tilespool" run --spool ./spool

# XCTest only: with Swift Testing enabled too, swift test prints a second summary last.
test: deps
	$(SWIFT) test --disable-swift-testing $(SWIFT_FLAGS)

# The bench builds release in its own scratch path, so it never contends with .build.
BENCH_SCRATCH ?= .build-bench
# ../shared/mapdata served like a real tile server on 127.0.0.1:8080, to try TileSpool offline.
serve-mapdata: deps
	bash scripts/serve-mapdata.sh

bench: deps
	$(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH)
	TILESPOOL_BIN="$$($(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --show-bin-path)/tilespool" bash bench/run.sh

clean:
	rm -rf .build .build-bench
