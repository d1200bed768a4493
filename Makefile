# Two-command quick start: `make demo` and `make test`. Both set everything up first, idempotently.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGE_STAMP := $(VENV)/.installed-package
COMPILED_SOURCES := airflow_provider_mysqlcdc/engine/binlog/rows_decoder/_rows.pyx \
  airflow_provider_mysqlcdc/engine/binlog/event_framer/_frames.pyx
S3_VENV := .venv-s3
S3_STAMP := $(S3_VENV)/.installed
MYSQL_ROOT := .mysql-root
MYSQL_STAMP := $(MYSQL_ROOT)/.installed
MYSQL_MIRROR ?= http://deb.debian.org/debian
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup system-deps demo-deps test lint demo bench lock clean

setup: system-deps $(STAMP) $(S3_STAMP) $(MYSQL_STAMP)

# Debian packages the project needs: a MariaDB server binary for the throwaway test/demo servers (and its
# client's mariadb-binlog, the independent decoder of the binlog audit), Java 17 for Spark, gcc with the Python
# headers for the compiled rows-event decoder (Debian's own Python has them in python3-dev), mmdebstrap for the
# Oracle MySQL root below, and for the suite only: Chromium with its driver for the UI tests, openssl for the
# TLS test's certificates. Installed only when missing. FOR=demo asks only for what `make demo` needs (and
# mmdebstrap only with SERVER=mysql).
system-deps:
	@need=""; \
	command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need="$$need mariadb-server"; \
	command -v java >/dev/null || need="$$need openjdk-17-jre-headless"; \
	command -v gcc >/dev/null || need="$$need gcc"; \
	$(PYTHON) -c 'import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
	  || need="$$need python3-dev"; \
	if [ "$(FOR)" != demo ] || [ "$(SERVER)" = mysql ]; then \
	  command -v mmdebstrap >/dev/null || need="$$need mmdebstrap"; \
	fi; \
	if [ "$(FOR)" != demo ]; then \
	  command -v mariadb-binlog >/dev/null || need="$$need mariadb-client"; \
	  [ -x /usr/bin/chromium ] || need="$$need chromium"; \
	  [ -x /usr/bin/chromedriver ] || need="$$need chromium-driver"; \
	  command -v openssl >/dev/null || need="$$need openssl"; \
	fi; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian packages:$$need"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$need; \
	fi

demo-deps:
	@$(MAKE) --no-print-directory system-deps FOR=demo SERVER=$(SERVER)

# the compiled rows-event decoder and event framer are rebuilt when their sources change; the suite's venv has the test extras
# (pytest, Selenium, DuckDB, ...), the demo's only the package and what it needs
$(STAMP): setup.py constraints.txt pyproject.toml $(COMPILED_SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	$(BIN)/python -m airflow_provider_mysqlcdc.testing.verify_install
	touch $@ $(PACKAGE_STAMP)

$(PACKAGE_STAMP): setup.py constraints.txt pyproject.toml $(COMPILED_SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	$(BIN)/python -m airflow_provider_mysqlcdc.testing.verify_install
	touch $@

# An S3-compatible server for the object store tests (moto), apart from the project's venv: its botocore needs
# a python-dateutil older than the project's lock allows.
$(S3_STAMP): constraints-s3-server.txt
	@test -x $(S3_VENV)/bin/python || $(PYTHON) -m venv $(S3_VENV)
	$(S3_VENV)/bin/python -m pip install -q --upgrade pip
	$(S3_VENV)/bin/python -m pip install -q -r constraints-s3-server.txt
	touch $@

# Oracle MySQL, the suite's second server flavor (and `make demo SERVER=mysql`): Debian's stable release has
# none, its unstable suite has mysql-server-core (9.7 LTS when this was written) built against a newer glibc
# than the host's. mmdebstrap unpacks that suite's server and client (mysqlbinlog: the binlog audit's decoder)
# into $(MYSQL_ROOT) (~25 s, ~490 MB); airflow_provider_mysqlcdc/testing/mysql.py runs the server through
# that root's own loader and libraries. The suite's Release file may be past its validity date: apt is told
# not to mind.
$(MYSQL_STAMP): | $(PACKAGE_STAMP)
	$(SUDO) rm -rf $(MYSQL_ROOT) $(MYSQL_ROOT).new
	$(SUDO) mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
	  --include=mysql-server-core,mysql-client-core sid $(MYSQL_ROOT).new $(MYSQL_MIRROR)
	mv $(MYSQL_ROOT).new $(MYSQL_ROOT)
	$(BIN)/python -c 'from airflow_provider_mysqlcdc.testing.mysql import mysql_version; print(mysql_version())'
	touch $@

# pytest exits 5 when it collected no tests: that is a failure, not a pass.
test: setup
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# What tests/test_code_quality.py checks inside make test, alone: ruff over the tree, mypy over the package.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# SERVER=mysql runs it on Oracle MySQL instead of MariaDB. Only what the demo needs: the package (not the
# suite's test extras), MariaDB or Oracle MySQL, Java
demo: demo-deps $(PACKAGE_STAMP) $(if $(filter mysql,$(SERVER)),$(MYSQL_STAMP))
	MYSQLCDC_DEMO_SERVER=$(or $(SERVER),mariadb) $(BIN)/python -m airflow_provider_mysqlcdc.testing.demo

# The benchmark suite: one table of figures next to baselines measured in the same run, saved to
# bench/results/latest.{md,png,json} (BENCH_ARGS='--quick', '--only catchup,latency', sizes: see --help).
# The single-purpose scripts (bench/engine_bench.py, snapshot_bench.py, planning.py, soak.py) run by hand.
bench: setup
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,bench]'
	$(BIN)/python bench/suite.py $(BENCH_ARGS)

# Re-resolve the pinned versions (review the diff before committing it).
lock: setup
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^airflow-provider-mysqlcdc' > constraints.new
	{ head -2 constraints.txt; cat constraints.new; } > constraints.txt && rm constraints.new

clean:
	$(SUDO) rm -rf $(VENV) $(S3_VENV) $(MYSQL_ROOT) build *.egg-info .pytest_cache
