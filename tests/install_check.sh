#!/usr/bin/env bash
# ctest install_layout: `cmake --install BUILD --prefix P` into a temporary prefix gives the
# layout the binary looks for (src/cli/run_cmd.cc FindPythonDir) and a working install:
#   P/bin/stallscope --version                 prints "stallscope VERSION" (through stallscope-full)
#   P/lib/stallscope/python/stallscope/         the package, its _version.py and libstallscope_rec.so
#   P/lib/stallscope/python/sitecustomize.py    the startup shim
#   P/lib/stallscope/demo-gpu/                  the demo GPUs of `top --demo` (src/cli/machine.h)
# and the installed package imports from there, finds its recorder library, and is what
# `P/bin/stallscope run` gives a job.
#   tests/install_check.sh BUILD VERSION
set -euo pipefail
build=$1
version=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT

fail() { echo "install_check: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$prefix.log" 2>&1 || { cat "$prefix.log" >&2; fail "cmake --install failed"; }
rm -f "$prefix.log"

for f in bin/stallscope bin/stallscope-full bin/stallscope-gpu-check lib/stallscope/python/sitecustomize.py \
  lib/stallscope/python/stallscope/__init__.py lib/stallscope/python/stallscope/_version.py \
  lib/stallscope/python/stallscope/libstallscope_rec.so lib/stallscope/demo-gpu/libnvidia-ml.so.1 \
  lib/stallscope/demo-gpu/scenario.json; do
  [ -f "$prefix/$f" ] || fail "$f not installed (prefix $prefix)"
done
for f in bin/stallscope bin/stallscope-full; do
  [ -x "$prefix/$f" ] || fail "$f is not executable"
done

got=$("$prefix/bin/stallscope" --version)
[ "$got" = "stallscope $version" ] || fail "bin/stallscope --version: '$got', expected 'stallscope $version'"

# The package as `run` puts it on the job's PYTHONPATH: imports from the prefix, knows its
# version, and finds libstallscope_rec.so next to it.
py=$(PYTHONPATH="$prefix/lib/stallscope/python" /usr/bin/python3 -c '
import os, stallscope
print(os.path.dirname(stallscope.__file__), stallscope.__version__,
      os.path.isfile(os.path.join(os.path.dirname(stallscope.__file__), "libstallscope_rec.so")))')
[ "$py" = "$prefix/lib/stallscope/python/stallscope $version True" ] ||
  fail "installed package: '$py'"
# `run` finds the installed package (FindPythonDir: <exe>/../lib/stallscope/python) and puts it
# on the job's PYTHONPATH.
mkdir "$prefix/job" && cd "$prefix/job"
job=$("$prefix/bin/stallscope" run -- /usr/bin/python3 -c 'import stallscope; print("PKG", stallscope.__file__)' 2>&1) ||
  fail "bin/stallscope run failed: $job"
grep -qx "PKG $prefix/lib/stallscope/python/stallscope/__init__.py" <<<"$job" ||
  fail "bin/stallscope run: the job did not import the installed package: $job"
# --demo finds the installed demo GPUs (DemoGpuDir: <exe>/../lib/stallscope/demo-gpu).
demo=$("$prefix/bin/stallscope" top --once --json --demo 2>&1) || fail "top --demo failed: $demo"
grep -q '"DEMO GPU 1 (fake NVML)"' <<<"$demo" || fail "top --demo shows no demo GPU: $demo"
echo "install_check: OK ($prefix)"
