#!/usr/bin/env bash
# Assembles the relocatable bundle from a build (`make dist` builds what it needs first):
#
#   tools/make_dist.sh [BUILD_DIR]        # default build
#   → BUILD_DIR/stallscope-<version>-linux-<machine>.tar.gz
#
# Layout (README "Bundle"):
#   bin/stallscope                 `record`, and the rest through stallscope-full (README "Two
#                                  binaries"); static libstdc++, rpath $ORIGIN/../lib
#   bin/stallscope-full            every command; static libstdc++, rpath $ORIGIN/../lib
#   bin/stallscope-gpu-check       tools/gpu_check.py
#   bin/stallscope-nvml-cost       bench/nvml_cost.c: NVML's cost per call (the check runs it);
#                                  plain C, needs only libc (dlopen)
#   lib/<soname>                   every library the binary needs beyond the system runtime
#   lib/stallscope/python/         the Python package + sitecustomize.py (`run` finds it here)
#   lib/stallscope/*.whl           the same package as a wheel, for `pip install`
#   lib/stallscope/demo-gpu/       the demo GPUs of `top --demo` (src/cli/machine.h DemoGpuDir):
#                                  the fake NVML (tests/fakes/nvml) and its scenario.json
#   examples/  README.md  docs/  VERSION  Makefile (gpu-check only)
#
# The tarball is reproducible for a given build: sorted entries, owner 0, mtime of the last
# commit, gzip without a timestamp.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
binary=$build/stallscope
[ -x "$binary" ] || { echo "make_dist: $binary not found: run \`make dist\`" >&2; exit 1; }
version=$("$binary" --version | awk '{print $2}')
name=stallscope-$version-linux-$(uname -m)
stage=$build/stage/$name
tarball=$build/$name.tar.gz

# What every Linux machine has (glibc, the GCC runtime): never bundled. libstdc++.so.6 is only
# needed by bundled libraries (libsimdjson: GLIBCXX_3.4.21, GCC >= 5), not by our own ELFs.
system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux-*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libgcc_s.so.* | libstdc++.so.*) return 0 ;;
  esac
  return 1
}

# The highest symbol version of one family (GLIBC, GLIBCXX, ...) that the ELF files need.
max_version() {
  local family=$1
  shift
  objdump -T "$@" | grep -oE "\(${family}_[0-9.]+\)" | tr -d '()' | sed "s/^${family}_//" |
    sort -V | tail -1
}

rm -rf "$build/stage" "$build"/stallscope-*.tar.gz
mkdir -p "$stage/bin" "$stage/lib/stallscope/python/stallscope" "$stage/examples"

for b in stallscope stallscope-full; do
  install -m 755 "$build/$b" "$stage/bin/$b"
  strip --strip-unneeded "$stage/bin/$b"
done
install -m 755 tools/gpu_check.py "$stage/bin/stallscope-gpu-check"
# The build's bench target (built here: `make dist` asks for stallscope only); a build without
# benchmarks (STALLSCOPE_BUILD_BENCH=OFF) has none, so compile the one file as CMake would.
if [ -d "$build/bench/CMakeFiles/nvml_cost.dir" ]; then
  cmake --build "$build" --target nvml_cost > /dev/null
  install -m 755 "$build/bench/nvml_cost" "$stage/bin/stallscope-nvml-cost"
else
  ${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$stage/bin/stallscope-nvml-cost" bench/nvml_cost.c -ldl
fi
strip --strip-unneeded "$stage/bin/stallscope-nvml-cost"

ldd "$binary" "$build/stallscope-full" | awk '$2 == "=>" { print $1, $3 }' | sort -u |
  while read -r soname path; do
    system_lib "$soname" && continue
    [ -f "$path" ] || { echo "make_dist: stallscope needs $soname: not found" >&2; exit 1; }
    install -m 644 "$path" "$stage/lib/$soname"
  done

# GCC 11's std::__throw_bad_array_new_length (GLIBCXX_3.4.29; only called when `new T[n]`
# overflows) is the one symbol above GLIBCXX_3.4.21 in Debian's prometheus-cpp: bundled copies
# drop its version, and the version need becomes weak (tools/elf_weaken_version.py).
for lib in "$stage"/lib/*.so*; do
  symbols=$(objdump -T "$lib")  # not `| grep -q`: its early exit fails the pipe (pipefail)
  if grep -q '(GLIBCXX_3.4.29) _ZSt28__throw_bad_array_new_lengthv' <<<"$symbols"; then
    /usr/bin/python3 tools/elf_weaken_version.py "$lib" _ZSt28__throw_bad_array_new_lengthv
  fi
done

# The package as CMake assembled it (python/CMakeLists.txt), without the optional pybind11
# extension `_core`: it is built for Debian's python3.11 only and needs GCC 12's libstdc++.
py=$stage/lib/stallscope/python
install -m 644 "$build"/python/stallscope/*.py "$py/stallscope/"
install -m 644 "$build/python/sitecustomize.py" "$py/"
install -m 755 "$build/python/stallscope/libstallscope_rec.so" "$py/stallscope/"
strip --strip-unneeded "$py/stallscope/libstallscope_rec.so"
python3 python/make_wheel.py --package "$py/stallscope" --out "$stage/lib/stallscope" --force \
  > /dev/null

# The demo GPUs, as the build put them beside its binary (`make dist` builds target demo_gpu).
demo=$stage/lib/stallscope/demo-gpu
[ -f "$build/demo-gpu/libnvidia-ml.so.1" ] ||
  { echo "make_dist: $build/demo-gpu not built: run \`make dist\`" >&2; exit 1; }
mkdir -p "$demo"
install -m 755 "$build/demo-gpu/libnvidia-ml.so.1" "$demo/"
strip --strip-unneeded "$demo/libnvidia-ml.so.1"
install -m 644 "$build/demo-gpu/scenario.json" "$demo/"

install -m 644 examples/*.py examples/README.md "$stage/examples/"
install -m 755 examples/*.sh "$stage/examples/"
install -m 644 README.md "$stage/"
# The README links into docs/ (every command, the formats, what was measured): ship it beside.
mkdir -p "$stage/docs/commands"
install -m 644 docs/*.md "$stage/docs/"
install -m 644 docs/commands/*.md "$stage/docs/commands/"
[ -f LICENSE ] && install -m 644 LICENSE "$stage/"
cat > "$stage/Makefile" <<'EOF'
# The bundle's only target (README "GPU check"); the same as: bin/stallscope-gpu-check
gpu-check:
	python3 bin/stallscope-gpu-check $(GPU_CHECK_FLAGS)
.PHONY: gpu-check
EOF

mapfile -t elfs < <(find "$stage" -type f -exec sh -c 'head -c4 "$1" | grep -q "^.ELF"' _ {} \; \
  -print | sort)
if commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  git diff --quiet HEAD -- || commit="$commit+local changes"
else
  commit="not a git checkout"
fi
cat > "$stage/VERSION" <<EOF
stallscope $version ($commit)
needs: $(uname -m) Linux, glibc >= $(max_version GLIBC "${elfs[@]}"), libgcc_s.so.1, libstdc++.so.6 >= GLIBCXX_$(max_version GLIBCXX "${elfs[@]}") (for lib/libsimdjson)
EOF

epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=go-w --format=gnu \
  -C "$build/stage" -cf - "$name" | gzip -9n > "$tarball"

echo "$tarball: $(du -k "$tarball" | cut -f1) KB, $(find "$stage" -type f | wc -l) files"
printf '  %-56s %-8s %-10s %s\n' ELF GLIBC GLIBCXX NEEDED
for f in "${elfs[@]}"; do
  needed=$(objdump -p "$f" | awk '/NEEDED/ { printf "%s ", $2 }')
  printf '  %-56s %-8s %-10s %s\n' "${f#"$stage"/}" "$(max_version GLIBC "$f")" \
    "$(max_version GLIBCXX "$f")" "$needed"
done
