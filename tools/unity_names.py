#!/usr/bin/env python3
"""Names a unity build would merge: the product libraries compile as batches of their sources
(CMakeLists.txt, STALLSCOPE_UNITY), so two files of one module that each define a helper of the
same name in an anonymous namespace (or `static`) either fail to compile or, worse, become
overloads of each other: `Dur(double)` of one file and `Dur(Ns)` of another once gave
"4782333 s" for 4.8 ms with no error. This check fails on any such name, so each file-local
helper has a name unique in its module.

    python3 tools/unity_names.py src        # exit 0: none; 1: every clash, one line each
    python3 tools/unity_names.py --tests src

It reads the code as clang-format leaves it: file-local declarations start at column 0 inside
`namespace {` ... `}  // namespace`, or with `static` at column 0. Test sources (*_test.cc) are
checked apart, with --tests (the test binaries are unity-built too). Standard library only.
"""

import argparse
import collections
import os
import re
import sys

_TYPE = re.compile(r"^(?:struct|class|union|enum(?: class| struct)?)\s+(\w+)\b(?!\s*;)")
_ALIAS = re.compile(r"^using\s+(\w+)\s*=")
_SKIP = re.compile(r"^(?:namespace\s+\w+\s*=|using\s+namespace\b|using\s+[\w:]+::\w+\s*;|"
                   r"template\b|friend\b|return\b|case\b|default:|public:|private:|protected:)")
# `type name(`: a function; `type name = ...`, `type name[`, `type name{`, `type name;`: an object.
_DECL = re.compile(r"^(?:\[\[[^\]]*\]\]\s*)?(?:[\w:<>,*&\s]|\(\*?\))+?[\s*&](\w+)\s*(\(|=|\[|\{|;)")


def file_local_names(text):
    """{name: first line number} of what the file defines at file scope for itself."""
    names = {}
    anonymous = 0
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"^namespace\s*\{", line):
            anonymous += 1
            continue
        if anonymous and re.match(r"^\}\s*//\s*namespace\s*$", line):
            anonymous -= 1
            continue
        if not line or line[0] in " \t}#/)" or _SKIP.match(line):
            continue
        local = anonymous > 0
        body = line
        if body.startswith("static "):
            local, body = True, body[len("static "):]
        if not local:
            continue
        match = _TYPE.match(body) or _ALIAS.match(body) or _DECL.match(body)
        if match and match.group(1) not in ("operator",):
            names.setdefault(match.group(1), number)
    return names


def header_names(text):
    """{name: line} of what a header declares at namespace scope (column 0)."""
    names = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line[0] in " \t}#/)" or _SKIP.match(line) or line.startswith("namespace"):
            continue
        match = _TYPE.match(line) or _ALIAS.match(line) or _DECL.match(line)
        if match:
            names.setdefault(match.group(1), number)
    return names


def clashes(src, tests=False):
    """[(module, name, [(file, line), ...])] for names defined file-locally in 2+ files of a
    module's library sources (with `tests`, of its test sources: a test binary is unity-built
    too), or file-locally in one and declared by the module's headers (a batch's other files
    then see the local one beside the header's: an overload)."""
    out = []
    for module in sorted(os.listdir(src)):
        folder = os.path.join(src, module)
        if not os.path.isdir(folder):
            continue
        seen = collections.defaultdict(list)
        declared = collections.defaultdict(list)
        aliases = collections.defaultdict(set)  # name -> the alias lines that define it
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".h"):
                with open(path, encoding="utf-8") as f:
                    for public, line in header_names(f.read()).items():
                        declared[public].append((path, line))
            if not name.endswith(".cc") or name.endswith("_test.cc") != tests:
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.splitlines()
            for local, line in file_local_names(text).items():
                seen[local].append((path, line))
                if _ALIAS.match(lines[line - 1]):
                    aliases[local].add(lines[line - 1].strip())
                else:
                    aliases[local].add(None)
        for local, where in sorted(seen.items()):
            if len(aliases[local]) == 1 and None not in aliases[local] and local not in declared:
                continue  # the same `using X = Y;` in several files: one type, nothing merges
            if len(where) > 1 or local in declared:
                out.append((module, local, where + declared.get(local, [])))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="the source tree, e.g. src")
    parser.add_argument("--tests", action="store_true",
                        help="check the test sources (*_test.cc) instead of the libraries'")
    args = parser.parse_args(argv)
    found = clashes(args.src, args.tests)
    for module, name, where in found:
        places = ", ".join(f"{path}:{line}" for path, line in where)
        print(f"{module}: `{name}` is file-local and defined or declared again ({places}): a "
              "unity build merges them; give the file-local one a name of its own")
    if found:
        return 1
    print(f"{args.src}: no file-local name defined twice in a module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
