#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (default 100 lines) under the given paths.

A heuristic scanner, not a parser: comments, strings and character literals are blanked, then
braces are matched. A brace opens a function body when every enclosing brace is a namespace,
class, struct, union, enum or `extern "C"` scope and the text before it holds a parameter list.
Lambdas and local classes count toward the function that holds them. Exit 1 when any is over.
"""
import argparse
import pathlib
import re
import sys

SCOPE_RE = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s+"C"\s*$')


def blank(text):
    """Replaces comments and literals by spaces, keeping newlines (line numbers stay right)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(')' + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append('""' + re.sub(r'[^\n]', ' ', text[i + 2:j])); i = j
            else:
                out.append(c); i += 1
        elif c in '"\'':
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # digit separator 1'000
                out.append(' '); i += 1; continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def long_functions(path, limit):
    text = blank(path.read_text(errors='replace'))
    stack = []  # 'scope' or ('func', start_line) or 'block'
    header_start = 0
    found = []
    line = 1
    for i, c in enumerate(text):
        if c == '\n':
            line += 1
        elif c == '{':
            header = text[header_start:i]
            if all(s == 'scope' for s in stack):
                h = ' '.join(header.split())
                if SCOPE_RE.search(h) or h.endswith('=') or not h:
                    stack.append('scope' if SCOPE_RE.search(h) else 'block')
                elif '(' in h:
                    name = re.findall(r'([~\w:<>]+)\s*\(', h)
                    stack.append(('func', line, name[0] if name else '?'))
                else:
                    stack.append('block')
            else:
                stack.append('block')
            header_start = i + 1
        elif c == '}':
            if stack:
                top = stack.pop()
                if isinstance(top, tuple):
                    length = line - top[1] + 1
                    if length > limit:
                        found.append((top[1], length, top[2]))
            header_start = i + 1
        elif c == ';':
            header_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('paths', nargs='+')
    ap.add_argument('--limit', type=int, default=100)
    args = ap.parse_args()
    over = 0
    for root in args.paths:
        files = [pathlib.Path(root)] if pathlib.Path(root).is_file() else sorted(
            p for p in pathlib.Path(root).rglob('*') if p.suffix in ('.cc', '.h'))
        for f in files:
            for start, length, name in long_functions(f, args.limit):
                print(f'{f}:{start}: {name} is {length} lines (limit {args.limit})')
                over += 1
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main())
