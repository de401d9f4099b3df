# TileSpool: build, test and bench entry points.
#   make deps      Debian (and PyPI, in .build/py) packages the build, tests and benches need (quick when present)
#   make deps-build  only the Debian packages the daemon builds and runs with (what make run installs)
#   make build     debug build            make release   release build
#   make run       deps + build, then the daemon on ./spool
#   make test      deps, then the XCTest suite, 4 test classes at once (the last output line is the
#                  summary, or after a failure a summary of what failed)
#   make bench     deps, a release build in .build-bench, then bench/run.sh (docs/benchmarks.md)
#   make install   release build, then the binary, systemd units and docs under $(DESTDIR)$(PREFIX)
#                  (TILESPOOL_BIN=path installs that binary instead of building)
#   make clean     remove .build and .build-bench
# SWIFT_FLAGS passes options to every swift command, e.g. SWIFT_FLAGS="--scratch-path /tmp/b".

SHELL := /bin/bash
.DEFAULT_GOAL := build

SWIFT ?= swift
SWIFT_FLAGS ?=
# What the daemon builds and runs with (make run), then what the tests and benches add (make deps).
BUILD_PACKAGES := libcurl4-openssl-dev libssl-dev libsqlite3-dev zlib1g-dev libdeflate-dev nginx-light
DEB_PACKAGES := $(BUILD_PACKAGES) jq python3 mapproxy curl time valgrind prometheus systemd \
    sqlite3 gdal-bin python3-venv python3-pip python3-selenium chromium chromium-driver xvfb imagemagick \
    qmlscene libqt5location5-plugin-mapboxgl qml-module-qtlocation qml-module-qtpositioning \
    qml-module-qtquick2 qml-module-qtquick-window2
# A real S3 server for the object-store tests (Ceph RADOS Gateway), without the recommended extras.
CEPH_PACKAGES := radosgw ceph-mon ceph-osd ceph-common
# Readers nobody here wrote, from PyPI, for the export tests and bench: the pmtiles reader and
# pmtiles-convert, mb-util, and the maplibre wheel (MapLibre GL JS). In a venv that also sees
# Debian's python3-selenium.
PY_VENV := .build/py
PY_PACKAGES := pmtiles mbutil maplibre
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: deps deps-build build release run test bench clean serve-mapdata install

deps: PACKAGES = $(DEB_PACKAGES)
deps-build: PACKAGES = $(BUILD_PACKAGES)
deps deps-build:
	@missing=""; \
	for p in $(PACKAGES); do \
	    dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "$@: all present ($(PACKAGES))"; exit 0; fi; \
	echo "deps: installing$$missing"; \
	if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then $(APT_GET) update; fi; \
	$(APT_GET) install -y $$missing || { $(APT_GET) update && $(APT_GET) install -y $$missing; }
	@if [ "$@" = deps-build ]; then exit 0; fi; \
	missing=""; \
	for p in $(CEPH_PACKAGES); do \
	    dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then echo "deps: installing$$missing"; \
	    $(APT_GET) install --no-install-recommends -y $$missing || { $(APT_GET) update && $(APT_GET) install --no-install-recommends -y $$missing; }; fi; \
	if [ -x $(PY_VENV)/bin/pmtiles-convert ] && [ -x $(PY_VENV)/bin/mb-util ] && \
	    $(PY_VENV)/bin/python -c 'import maplibre' 2>/dev/null; then echo "deps: python packages present ($(PY_PACKAGES))"; \
	else echo "deps: installing python packages in $(PY_VENV): $(PY_PACKAGES)"; \
	    /usr/bin/python3 -m venv --system-site-packages $(PY_VENV) && $(PY_VENV)/bin/pip install -q $(PY_PACKAGES); fi

build:
	$(SWIFT) build -c debug $(SWIFT_FLAGS)

release:
	$(SWIFT) build -c release $(SWIFT_FLAGS)

run: deps-build build
	"$$($(SWIFT) build -c debug $(SWIFT_FLAGS) --show-bin-path)/tilespool" run --spool ./spool

# The XCTest suite, several test classes at once (scripts/test-parallel.sh: one process per class,
# TILESPOOL_TEST_WORKERS at once, default 4), since most of the suite waits on daemons and servers.
# Its output is kept in .build/test.log (each class's piece whole) and .build/test.log.d/; after a
# failure the last lines summarise it (the failed tests, a class whose process died with the test
# it was running and the crash's first frames). One class alone:
#   swift build --build-tests && .build/debug/TileSpoolPackageTests.xctest TileSpoolTests.StoreTests
test: deps
	@mkdir -p .build; echo "$(SWIFT) build --build-tests $(SWIFT_FLAGS)"; \
	$(SWIFT) build --build-tests $(SWIFT_FLAGS) || exit $$?; \
	bundle="$$($(SWIFT) build --show-bin-path $(SWIFT_FLAGS))/TileSpoolPackageTests.xctest"; \
	bash scripts/test-parallel.sh "$$bundle" .build/test.log || \
	{ rc=$$?; bash scripts/test-failure-summary.sh .build/test.log; exit $$rc; }

# The bench builds release in its own scratch path, so it never contends with .build.
BENCH_SCRATCH ?= .build-bench
# ../shared/mapdata served like a real tile server on 127.0.0.1:8080, to try TileSpool offline.
serve-mapdata: deps-build
	bash scripts/serve-mapdata.sh

bench: deps
	$(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH)
	TILESPOOL_BIN="$$($(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --show-bin-path)/tilespool" bash bench/run.sh

# make install PREFIX=/usr DESTDIR=/tmp/pkg: bin/tilespool, lib/systemd/system/tilespool{,-gc}.service
# and tilespool-gc.timer (with the installed paths), share/doc/tilespool/*.md and tilespool.txt
# (`tilespool --help` and `tilespool run --help`). See docs/operations.md.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR = $(PREFIX)/share/doc/tilespool
TILESPOOL_BIN ?=
install:
	@bin="$(TILESPOOL_BIN)"; if [ -z "$$bin" ]; then $(SWIFT) build -c release $(SWIFT_FLAGS) && \
	    bin="$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)/tilespool"; fi; \
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(DOCDIR)" && \
	install -m 0755 "$$bin" "$(DESTDIR)$(BINDIR)/tilespool" && \
	for u in tilespool.service tilespool-gc.service tilespool-gc.timer; do \
	    sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' "dist/$$u" > "$(DESTDIR)$(UNITDIR)/$$u" && \
	    chmod 0644 "$(DESTDIR)$(UNITDIR)/$$u"; done && \
	install -m 0644 README.md docs/*.md "$(DESTDIR)$(DOCDIR)/" && \
	{ "$$bin" --help; echo; "$$bin" run --help; } > "$(DESTDIR)$(DOCDIR)/tilespool.txt" && \
	echo "installed $(DESTDIR)$(BINDIR)/tilespool, units in $(DESTDIR)$(UNITDIR), docs in $(DESTDIR)$(DOCDIR)"

clean:
	rm -rf .build .build-bench
