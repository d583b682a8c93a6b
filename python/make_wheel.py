#!/usr/bin/env python3
"""Builds an installable wheel (PEP 427) of the stallscope package from an assembled package
directory (what `make build` leaves in build/python/stallscope), offline, standard library only.

    python3 python/make_wheel.py --package build/python/stallscope --out build/dist
    -> build/dist/stallscope-<version>-py3-none-linux_<machine>.whl

    python -m pip install --no-index build/dist/stallscope-0.1.0-py3-none-linux_x86_64.whl

With --bundle STAGE (`make wheel`: the staged bundle of tools/make_dist.sh), the platform wheel
with everything: the bundle's bin/, lib/ and VERSION inside the package as stallscope/_bundle/
(the bundle's own layout, so the binaries find their libraries and `run` its Python shim as in
the bundle), and a `stallscope` script (python/scripts/stallscope) that execs
stallscope/_bundle/bin/stallscope; `python -m stallscope` does the same. Its tag is
py3-none-manylinux_2_<N>_<machine>, N the glibc floor the bundle's VERSION states (measured by
make_dist.sh from the ELF files' symbol versions):

    python3 python/make_wheel.py --package build/python/stallscope --bundle build/stage/NAME \
      --out build/dist   # -> stallscope-0.1.0-py3-none-manylinux_2_34_x86_64.whl

What goes in (and what does not):
- every stallscope/*.py, and stallscope/libstallscope_rec.so: the recorder as a C library loaded
  with ctypes, so one wheel serves every CPython >= 3.8 ("py3-none"), but only on this platform
  ("linux_<machine>"). Its debug info is stripped in the wheel's copy (objcopy, else strip, else
  copied as is).
- not _core*.so: the optional pybind11 extension is built for one interpreter only.
- not sitecustomize.py: installed into site-packages it would hijack every interpreter of the
  user's environment. The zero-code hooks come from `stallscope run`, which puts its own shim on
  PYTHONPATH; an installed copy only records when the job imports it (or under
  STALLSCOPE_PROFILE=1).

The wheel is reproducible: the same inputs give a byte-identical file (fixed timestamps and
permissions, sorted entries). An existing different wheel is only replaced with --force.
Runs under Python >= 3.8. Exit status: 0 written (or already identical), 1 error.
"""

import argparse
import ast
import base64
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

NAME = "stallscope"
LIBRARY = "libstallscope_rec.so"
SUMMARY = "Phase markers and recorder for stallscope: why is this PyTorch training job slow"
REQUIRES_PYTHON = ">=3.8"
GENERATOR = "stallscope make_wheel.py"
BUNDLE_SUMMARY = ("Why is this PyTorch training job slow: the stallscope command (binaries "
                  "inside) and its in-job package")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "stallscope")
# What of the bundle goes into the platform wheel: its binaries and libraries and VERSION; not
# the package-only wheel in lib/stallscope/, the examples, the docs or the gpu-check Makefile.
BUNDLE_PARTS = ("bin", "lib", "VERSION")

# PEP 427 / zip: a fixed timestamp (the zip epoch) and fixed permissions make the file
# reproducible; create_system 3 (Unix) makes the permission bits count when unpacked.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_MODE_FILE = 0o100644
_MODE_EXEC = 0o100755


class WheelError(Exception):
    """An error the user can fix; printed as one line."""


def read_version(package_dir):
    """__version__ from the package's _version.py (written by the build), read without
    importing it."""
    init = os.path.join(package_dir, "_version.py")
    try:
        with open(init, encoding="utf-8") as f:
            tree = ast.parse(f.read(), init)
    except (OSError, SyntaxError, ValueError) as e:
        raise WheelError(f"{init}: cannot read the package version: {e}")
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__version__"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise WheelError(f"{init}: no __version__ = \"...\" string")


def platform_tag():
    """linux_<machine>, as pip spells this platform (e.g. linux_x86_64)."""
    machine = platform.machine().lower().replace("-", "_").replace(".", "_")
    if not machine:
        raise WheelError("cannot tell this machine's architecture (platform.machine() is empty)")
    return f"linux_{machine}"


def stripped_library(path, scratch):
    """The library's bytes with debug info removed (objcopy or strip, whichever works), else as
    is. Returns (bytes, how)."""
    out = os.path.join(scratch, LIBRARY)
    tools = (("objcopy", ["--strip-debug", path, out]),
             ("strip", ["--strip-debug", "-o", out, path]))
    for tool, args in tools:
        exe = shutil.which(tool)
        if exe is None:
            continue
        proc = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False)
        if proc.returncode == 0 and os.path.isfile(out):
            with open(out, "rb") as f:
                return f.read(), f"{tool} --strip-debug"
    with open(path, "rb") as f:
        return f.read(), "not stripped (no objcopy or strip worked)"


def record_hash(data):
    """RECORD's hash field: sha256, urlsafe base64 without padding (PEP 376 / PEP 427)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def check_package(package_dir):
    """Raises WheelError unless package_dir is an assembled package (with the C library)."""
    if not os.path.isdir(package_dir):
        raise WheelError(f"{package_dir}: no such package directory (run `make build` first)")
    if not os.path.isfile(os.path.join(package_dir, LIBRARY)):
        raise WheelError(f"{package_dir}: lacks {LIBRARY} (run `make build` first)")


def collect(package_dir, scratch):
    """[(archive name, bytes, mode)] for the package's files, sorted by name; and how the
    library was stripped."""
    library = os.path.join(package_dir, LIBRARY)
    files = []
    for name in sorted(os.listdir(package_dir)):
        path = os.path.join(package_dir, name)
        if name.endswith(".py") and os.path.isfile(path):
            with open(path, "rb") as f:
                files.append((f"{NAME}/{name}", f.read(), _MODE_FILE))
    data, how = stripped_library(library, scratch)
    files.append((f"{NAME}/{LIBRARY}", data, _MODE_EXEC))
    files.sort(key=lambda item: item[0])
    return files, how


def glibc_floor(bundle_dir):
    """The glibc minor version the bundle needs (its VERSION's "glibc >= 2.N")."""
    path = os.path.join(bundle_dir, "VERSION")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise WheelError(f"{path}: cannot read the bundle's VERSION: {e.strerror or e} (run "
                         "`make dist` first)")
    match = re.search(r"glibc >= 2\.(\d+)", text)
    if match is None:
        raise WheelError(f"{path}: no \"glibc >= 2.N\" line (not a bundle of make_dist.sh?)")
    return int(match.group(1))


def collect_bundle(bundle_dir):
    """[(archive name, bytes, mode)] of the bundle's parts under stallscope/_bundle/, sorted."""
    files = []
    for part in BUNDLE_PARTS:
        top = os.path.join(bundle_dir, part)
        if not os.path.exists(top):
            raise WheelError(f"{top}: missing from the bundle (run `make dist` first)")
        paths = [top] if os.path.isfile(top) else [
            os.path.join(root, name) for root, _, names in os.walk(top) for name in names]
        for path in paths:
            rel = os.path.relpath(path, bundle_dir).replace(os.sep, "/")
            if rel.startswith("lib/stallscope/") and rel.endswith(".whl"):
                continue
            if os.path.islink(path) or not os.path.isfile(path):
                raise WheelError(f"{path}: not a plain file (a wheel holds no links)")
            with open(path, "rb") as f:
                data = f.read()
            mode = _MODE_EXEC if os.access(path, os.X_OK) else _MODE_FILE
            files.append((f"{NAME}/_bundle/{rel}", data, mode))
    files.sort(key=lambda item: item[0])
    return files


def script_file(version):
    """The `stallscope` script, as pip installs wheel scripts (#!python rewritten)."""
    try:
        with open(SCRIPT, "rb") as f:
            data = f.read()
    except OSError as e:
        raise WheelError(f"{SCRIPT}: cannot read: {e.strerror or e}")
    return (f"{NAME}-{version}.data/scripts/stallscope", data, _MODE_EXEC)


def dist_info(version, tag, summary=SUMMARY):
    """[(archive name, bytes)] of METADATA and WHEEL (RECORD is made from the rest)."""
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: {summary}\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
    )
    wheel = (
        "Wheel-Version: 1.0\n"
        f"Generator: {GENERATOR}\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )
    info = f"{NAME}-{version}.dist-info"
    return [(f"{info}/METADATA", metadata.encode("utf-8")),
            (f"{info}/WHEEL", wheel.encode("utf-8"))]


def build_wheel(package_dir, bundle_dir=None):
    """(file name, wheel bytes, how the library was stripped). With bundle_dir, the platform
    wheel: the bundle inside the package and the `stallscope` script."""
    check_package(package_dir)
    version = read_version(package_dir)
    tag = f"py3-none-{platform_tag()}"
    summary = SUMMARY
    with tempfile.TemporaryDirectory(prefix="stallscope-wheel-") as scratch:
        files, how = collect(package_dir, scratch)
    if bundle_dir is not None:
        machine = platform_tag()[len("linux_"):]
        tag = f"py3-none-manylinux_2_{glibc_floor(bundle_dir)}_{machine}"
        summary = BUNDLE_SUMMARY
        files = sorted(files + collect_bundle(bundle_dir), key=lambda item: item[0])
        files.append(script_file(version))
    files += [(name, data, _MODE_FILE) for name, data in dist_info(version, tag, summary)]
    record_name = f"{NAME}-{version}.dist-info/RECORD"
    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data, _ in files)
    record += f"{record_name},,\n"
    files.append((record_name, record.encode("utf-8"), _MODE_FILE))

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, mode in files:  # package files sorted, then the dist-info, RECORD last
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.create_system = 3
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return f"{NAME}-{version}-{tag}.whl", buf.getvalue(), how


def write_wheel(out_dir, file_name, data, force):
    """Writes the wheel into out_dir (atomically). Returns (path, what happened)."""
    path = os.path.join(out_dir, file_name)
    if os.path.lexists(path):
        try:
            with open(path, "rb") as f:
                same = f.read() == data
        except OSError:
            same = False
        if same:
            return path, "unchanged"
        if not force:
            raise WheelError(f"{path}: exists and differs from the new wheel (use --force to "
                             "replace it)")
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{file_name}.", dir=out_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise WheelError(f"{path}: cannot write: {e.strerror or e}")
    return path, "written"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Build a stallscope wheel (py3-none-linux_<machine>) from an assembled "
                    "package directory, offline.",
        epilog="example: python3 python/make_wheel.py --package build/python/stallscope "
               "--out build/dist")
    parser.add_argument("--package", required=True,
                        help="the assembled package directory, e.g. build/python/stallscope")
    parser.add_argument("--bundle", metavar="STAGE",
                        help="a staged bundle (build/stage/stallscope-<version>-linux-<machine>, "
                             "tools/make_dist.sh): make the platform wheel with its binaries")
    parser.add_argument("--out", required=True, help="directory the .whl is written to")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing wheel of the same name that differs")
    args = parser.parse_args(argv)
    try:
        file_name, data, how = build_wheel(args.package, args.bundle)
        path, what = write_wheel(args.out, file_name, data, args.force)
    except WheelError as e:
        print(f"make_wheel.py: error: {e}", file=sys.stderr)
        return 1
    print(f"{path} ({what}, {len(data)} bytes; {LIBRARY}: {how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
