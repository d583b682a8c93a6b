#!/usr/bin/env python3
"""Prints the module graph of src/ as its CMake files declare it, or checks the README's copy.

Each src/<module>/CMakeLists.txt declares `add_library(stallscope_<module> ...)` and links the
modules it uses with `target_link_libraries(stallscope_<module> ... stallscope::<other> ...)`.
The graph printed is one line per module, `module → the modules it links`, lowest first.
--check README.md: exit 1 unless the README holds that text between the lines
`<!-- module-graph -->` and `<!-- /module-graph -->` (inside a code block), and unless every
`#include "<module>/..."` in a module's own sources (not its tests) names the module itself or a
module it links directly: a module that reaches another only through a third one must say so.
"""
import argparse
import pathlib
import re
import sys

LINK_RE = re.compile(r'target_link_libraries\(\s*stallscope_(\w+)\b(.*?)\)', re.S)


def graph(src):
    deps = {}
    for cmake in sorted(pathlib.Path(src).glob('*/CMakeLists.txt')):
        module = cmake.parent.name
        text = re.sub(r'#[^\n]*', '', cmake.read_text())
        if not re.search(rf'add_library\(\s*stallscope_{module}\b', text):
            continue
        deps.setdefault(module, set())
        # stallscope_<module>_<part> (e.g. cli_record) is a library of the module itself.
        def own(name):
            return name == module or name.startswith(module + '_')
        for target, body in LINK_RE.findall(text):
            if not own(target):
                continue
            deps[module] |= {d for d in re.findall(r'stallscope::(\w+)', body)
                             if d not in ('warnings',) and not own(d)}
    return deps


def layers(deps):
    """Modules by depth (0: links no module); raises on a cycle."""
    depth = {}

    def visit(m, path):
        if m in path:
            raise SystemExit('module cycle: ' + ' → '.join(path + [m]))
        if m not in depth:
            depth[m] = 1 + max((visit(d, path + [m]) for d in deps.get(m, ()) if d in deps),
                               default=-1)
        return depth[m]

    for m in deps:
        visit(m, [])
    return depth


def render(deps):
    depth = layers(deps)
    width = max(len(m) for m in deps)
    lines = []
    for m in sorted(deps, key=lambda m: (depth[m], m)):
        used = sorted(deps[m], key=lambda d: (depth.get(d, 0), d))
        lines.append(f'{m:<{width}} → {", ".join(used) if used else "—"}')
    return '\n'.join(lines) + '\n'


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"(\w+)/[^"]+"', re.M)


def undeclared_includes(src, deps):
    """`file:line: includes <module>/... but <own> does not link <module>` for each include of
    another module's header that the including module does not link directly."""
    problems = []
    for module in sorted(deps):
        for path in sorted(pathlib.Path(src, module).glob('*')):
            if path.suffix not in ('.cc', '.h') or path.stem.endswith(('_test', '_bench')):
                continue
            text = path.read_text()
            for m in INCLUDE_RE.finditer(text):
                other = m.group(1)
                if other in deps and other not in (module, 'base') and other not in deps[module]:
                    line = text.count('\n', 0, m.start()) + 1
                    problems.append(f'{path}:{line}: includes {other}/... but {module} does not '
                                    f'link stallscope::{other} (src/{module}/CMakeLists.txt)')
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--src', default=str(pathlib.Path(__file__).resolve().parent.parent / 'src'))
    ap.add_argument('--check', metavar='README')
    args = ap.parse_args()
    text = render(graph(args.src))
    if not args.check:
        sys.stdout.write(text)
        return 0
    problems = undeclared_includes(args.src, graph(args.src))
    if problems:
        print('\n'.join(problems), file=sys.stderr)
        return 1
    readme = pathlib.Path(args.check).read_text()
    m = re.search(r'<!-- module-graph -->\n```\n(.*?)```\n<!-- /module-graph -->', readme, re.S)
    if not m:
        print(f'{args.check}: no <!-- module-graph --> block', file=sys.stderr)
        return 1
    if m.group(1) != text:
        print(f'{args.check}: the module graph is out of date; it should read:\n{text}',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
