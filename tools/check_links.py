#!/usr/bin/env python3
"""Checks that the documentation's links resolve: files exist and anchors name a heading.

    python3 tools/check_links.py [--help-from BIN] ROOT

Reads README.md, docs/**/*.md and src/*/README.md under ROOT and checks
- every Markdown link `[text](target)` and reference definition `[id]: target`: a relative
  target must exist relative to the linking file's folder; `file.md#anchor` and `#anchor` must
  name a heading of that Markdown file;
- every bare mention of a `docs/...md` or `README...md` path (in running text or `code`): it must
  exist relative to ROOT (and its `#anchor`, when given, must name a heading).
Links inside fenced code blocks are not checked (they are examples or program output), nor are
http(s), mailto and other URLs.

An anchor is a heading's GitHub slug: the heading's text lower-cased, backticks and every
character but letters, digits, spaces, `-` and `_` dropped, spaces turned into `-`; a repeated
slug gets `-1`, `-2`, ... in order.

--help-from BIN also runs `BIN --help` and `BIN COMMAND --help` for every command that
`BIN --help` lists, and checks every `*.md` path (and `file.md#anchor`) in that text exists
relative to ROOT. A `--help` that lists no command is an error.

The program's own text is checked too (issue 41: a rule's advice cited references/multinode.md,
which exists nowhere): every string literal of src/**/*.cc and *.h (but *_test.cc; adjacent
literals joined, as the compiler joins them) and every string of python/stallscope/*.py (but
docstrings), which is what reports, recommendations, errors and --help print. Each `*.md` path
in them must exist relative to ROOT, and so must the `*.md` paths of --help: and, being read by
users of the bundle and the wheel, name a document that ships: README.md or docs/*.md,
docs/commands/*.md (tools/make_dist.sh copies those into the bundle).

Prints one line per problem, `FILE:LINE: link to missing file X`, `FILE:LINE: missing anchor
#Y in X` or `FILE:LINE: cites X, which does not ship ...`, and exits 1; else prints `N links in M files: all resolve` and exits 0. Exit 2 on a
usage error. Standard library only, Python >= 3.8.
"""

import argparse
import ast
import os
import re
import subprocess
import sys
import urllib.parse

FENCE_RE = re.compile(r'^ {0,3}(?:[-*+]\s+|\d+[.)]\s+)?\s*(`{3,}|~{3,})')
HEADING_RE = re.compile(r'^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$')
CODE_SPAN_RE = re.compile(r'(`+)(.+?)\1')
# [text](target) or [text](target "title"): the text may wrap onto the next lines of its
# paragraph and hold one level of brackets; the target may hold balanced parentheses.
INLINE_LINK_RE = re.compile(
    r'\[(?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\[\]\n]*\])*\]'
    r'\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)'
    r'(?:\s+(?:"[^"\n]*"|\'[^\'\n]*\'|\([^)\n]*\)))?\s*\)')
REF_DEF_RE = re.compile(r'^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
# Bare paths: docs/....md or README....md, not part of a longer path (src/x/README.md is not
# one: it names a file relative to nothing in particular).
BARE_RE = re.compile(r'(?<![\w./-])((?:docs/[\w./-]*?|README[\w.-]*?)\.md)(#[\w-]+)?(?![\w/])')
# In --help text: any *.md path.
HELP_MD_RE = re.compile(r'(?<![\w./-])([\w][\w./-]*?\.md)(#[\w-]+)?(?![\w/])')
# What program output may cite: the documents the bundle ships (tools/make_dist.sh).
SHIPPED_RE = re.compile(r'^(?:README\.md|docs/(?:commands/)?[\w.-]+\.md)$')
SCHEME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')
HTML_ANCHOR_RE = re.compile(r'<a\s+(?:[^>]*?\s)?(?:id|name)\s*=\s*"([^"]+)"', re.I)


def slug(text):
    """GitHub's anchor for a heading's text."""
    # Links and images read as their text; inline HTML tags are dropped.
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)
    text = re.sub(r'<[^>]+>', '', text)
    text = text.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)  # \w keeps letters and digits of any script, and _
    return text.replace(' ', '-')


def strip_code_spans(line):
    """The line with inline code replaced by spaces (lengths kept, so columns still match)."""
    return CODE_SPAN_RE.sub(lambda m: ' ' * len(m.group(0)), line)


def markdown_lines(text):
    """(line number, line) for each line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split('\n'), 1):
        m = FENCE_RE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                line.strip().strip(fence[0]) == '':
            fence = None


def anchors_of(text):
    """Every anchor a Markdown text defines: heading slugs (with GitHub's -N for repeats) and
    <a id=...>/<a name=...>."""
    seen = {}
    anchors = set()
    for _, line in markdown_lines(text):
        m = HEADING_RE.match(line)
        if m:
            title = re.sub(r'[ \t]+#+$', '', m.group(2) or '')
            base = slug(title)
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f'{base}-{n}')
        for a in HTML_ANCHOR_RE.findall(line):
            anchors.add(a)
    return anchors


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.problems = []
        self.links = 0
        self.files = 0
        self._anchors = {}

    def anchors(self, path):
        if path not in self._anchors:
            with open(path, encoding='utf-8', errors='replace') as f:
                self._anchors[path] = anchors_of(f.read())
        return self._anchors[path]

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def check_target(self, where, base_dir, target, this_file=None):
        """One link target (path, path#anchor, or #anchor in this_file) from base_dir; where is
        FILE:LINE for the message."""
        self.links += 1
        path, _, anchor = target.partition('#')
        path = urllib.parse.unquote(path)
        anchor = urllib.parse.unquote(anchor)
        if path:
            full = os.path.normpath(os.path.join(base_dir, path))
            if not os.path.exists(full):
                self.problems.append(f'{where}: link to missing file {path}')
                return
        elif this_file is None:
            return
        else:
            full = this_file
        if anchor and full.endswith('.md') and os.path.isfile(full):
            if anchor not in self.anchors(full):
                self.problems.append(f'{where}: missing anchor #{anchor} in {self.rel(full)}')

    def check_markdown(self, path):
        self.files += 1
        with open(path, encoding='utf-8', errors='replace') as f:
            text = f.read()
        name = self.rel(path)
        base = os.path.dirname(path)
        # The text outside fenced code, line for line (fenced lines blank), inline code blanked:
        # links may wrap across the lines of a paragraph.
        lines = [''] * (text.count('\n') + 1)
        for number, line in markdown_lines(text):
            lines[number - 1] = line
        prose = '\n'.join(strip_code_spans(line) for line in lines)
        for m in INLINE_LINK_RE.finditer(prose):
            number = prose.count('\n', 0, m.start()) + 1
            self.check_link(f'{name}:{number}', base, m.group(1), path)
        for number, line in enumerate(prose.split('\n'), 1):
            m = REF_DEF_RE.match(line)
            if m:
                self.check_link(f'{name}:{number}', base, m.group(1), path)
        # Bare paths, in code spans too, with the link targets blanked (checked above).
        raw = INLINE_LINK_RE.sub(blank_target, '\n'.join(lines))
        for number, line in enumerate(raw.split('\n'), 1):
            for m in BARE_RE.finditer(line):
                self.check_target(f'{name}:{number}', self.root, m.group(1) + (m.group(2) or ''))

    def check_link(self, where, base, target, this_file):
        target = target.strip()
        if target.startswith('<') and target.endswith('>'):
            target = target[1:-1]
        if not target or SCHEME_RE.match(target) or target.startswith('//'):
            return
        self.check_target(where, base, target, this_file)

    def check_help(self, binary):
        """Every *.md path in `BIN --help` and `BIN COMMAND --help`; False when no command."""
        text = run_help(binary, [])
        if text is None:
            self.problems.append(f'{binary} --help: could not run it')
            return False
        self.check_help_text(f'{os.path.basename(binary)} --help', text)
        commands = parse_commands(text, os.path.basename(binary))
        if not commands:
            self.problems.append(f'{binary} --help: found no commands in its output')
            return False
        for command in commands:
            sub = run_help(binary, [command])
            label = f'{os.path.basename(binary)} {command} --help'
            if sub is None:
                self.problems.append(f'{label}: failed')
                continue
            self.check_help_text(label, sub)
        return True

    def check_help_text(self, label, text):
        self.files += 1
        for number, line in enumerate(text.split('\n'), 1):
            self.check_citations(f'{label}:{number}', line)

    def check_citations(self, where, text):
        """Every *.md path in program output: it exists under ROOT and ships."""
        for m in HELP_MD_RE.finditer(text):
            path = m.group(1)
            if not os.path.exists(os.path.join(self.root, path)):
                self.check_target(where, self.root, path + (m.group(2) or ''))
            elif not SHIPPED_RE.match(path):
                self.links += 1
                self.problems.append(f'{where}: cites {path}, which does not ship (program '
                                     'output may cite README.md and docs/: tools/make_dist.sh)')
            else:
                self.check_target(where, self.root, path + (m.group(2) or ''))

    def check_program(self):
        """The *.md paths in the program's own text (program_sources)."""
        for path in program_sources(self.root):
            with open(path, encoding='utf-8', errors='replace') as f:
                text = f.read()
            self.files += 1
            strings = python_strings(text) if path.endswith('.py') else cpp_strings(text)
            for number, literal in strings:
                self.check_citations(f'{self.rel(path)}:{number}', literal)


def program_sources(root):
    """The files whose text the program prints: src/**/*.cc and *.h but tests, and the Python
    package python/stallscope/*.py."""
    files = []
    for folder, dirs, names in os.walk(os.path.join(root, 'src')):
        dirs.sort()
        files.extend(os.path.join(folder, n) for n in sorted(names)
                     if n.endswith(('.cc', '.h')) and not n.endswith('_test.cc'))
    package = os.path.join(root, 'python', 'stallscope')
    if os.path.isdir(package):
        files.extend(os.path.join(package, n) for n in sorted(os.listdir(package))
                     if n.endswith('.py'))
    return files


CPP_TOKEN_RE = re.compile(
    r'(?P<comment>//[^\n]*|/\*.*?\*/)'
    r'|(?:u8|[uUL])?R"(?P<delim>[^(\s]{0,16})\((?P<raw>.*?)\)(?P=delim)"'
    r'|(?:u8|[uUL])?"(?P<str>(?:[^"\\\n]|\\.)*)"'
    r"|'(?:[^'\\\n]|\\.)*'"
    r'|(?P<space>\s+)', re.S)


def cpp_strings(text):
    """[(line, text)] of a C++ source's string literals; adjacent literals (only blanks or
    comments between them) are one text, at the line of the first. Escapes stay as written
    (a path has none)."""
    out = []
    joined = None  # [line, text] of the literals being joined
    pos = 0
    while pos < len(text):
        m = CPP_TOKEN_RE.match(text, pos)
        if m is None:  # code: ends a run of literals
            if joined:
                out.append(tuple(joined))
                joined = None
            pos += 1
            continue
        pos = m.end()
        literal = m.group('str') if m.group('str') is not None else m.group('raw')
        if literal is not None:
            if joined is None:
                joined = [text.count('\n', 0, m.start()) + 1, '']
            joined[1] += literal
        elif m.group('comment') is None and m.group('space') is None and joined:
            out.append(tuple(joined))  # a character literal
            joined = None
    if joined:
        out.append(tuple(joined))
    return out


def python_strings(text):
    """[(line, text)] of a Python module's string constants, docstrings left out."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def blank_target(m):
    """A link with its (target) blanked, so a bare-path scan does not see the target twice."""
    s = m.group(0)
    i = s.rfind('](')
    return s[:i + 2] + ' ' * (len(s) - i - 3) + ')'


def run_help(binary, args):
    """stdout + stderr of BIN ARGS --help, or None when it cannot run or exits non-zero."""
    env = dict(os.environ, NO_COLOR='1', COLUMNS='100')
    try:
        p = subprocess.run([binary] + args + ['--help'], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.decode('utf-8', errors='replace')


def parse_commands(text, binary_name):
    """The commands a --help lists: the first word of each indented line under a heading that
    names commands ("Subcommands:", "Commands:", "COMMANDS"), optionally after the program's
    own name. Falls back to every indented `word  description` line when no such heading."""
    word = re.compile(r'^[a-z][a-z0-9_-]*$')
    names = {binary_name, 'stallscope', 'stallscope-full'}

    def first_word(line):
        tokens = line.split()
        while tokens and tokens[0] in names:
            tokens = tokens[1:]
        if tokens and word.match(tokens[0].rstrip(',:')):
            return tokens[0].rstrip(',:')
        return None

    found = []
    in_section = False
    for line in text.split('\n'):
        if not line.strip():
            continue
        if not line[0].isspace():
            header = line.strip().rstrip(':').strip().lower()
            in_section = header.endswith('commands') or header.endswith('command')
            continue
        # An entry is indented a little; a wrapped description is indented far more.
        if in_section and re.match(r'^[ \t]{1,8}\S', line):
            w = first_word(line)
            if w and w not in found:
                found.append(w)
    if found:
        return found
    for line in text.split('\n'):
        m = re.match(r'^[ \t]{1,8}(\S+)[ \t]{2,}\S', line)
        if m and word.match(m.group(1)) and m.group(1) not in found:
            found.append(m.group(1))
    return found


def markdown_files(root):
    files = []
    readme = os.path.join(root, 'README.md')
    if os.path.isfile(readme):
        files.append(readme)
    docs = os.path.join(root, 'docs')
    for folder, dirs, names in os.walk(docs):
        dirs.sort()
        files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith('.md'))
    src = os.path.join(root, 'src')
    if os.path.isdir(src):
        for module in sorted(os.listdir(src)):
            path = os.path.join(src, module, 'README.md')
            if os.path.isfile(path):
                files.append(path)
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(
        description='Checks that the links of README.md, docs/**/*.md and src/*/README.md '
                    '(and of BIN --help) resolve.')
    ap.add_argument('--help-from', metavar='BIN',
                    help='also check the *.md paths in BIN --help and BIN COMMAND --help')
    ap.add_argument('root', metavar='ROOT', help='the repository root')
    args = ap.parse_args(argv)
    if not os.path.isdir(args.root):
        print(f'check_links: {args.root}: not a folder', file=sys.stderr)
        return 2
    checker = Checker(args.root)
    for path in markdown_files(checker.root):
        checker.check_markdown(path)
    checker.check_program()
    if args.help_from:
        checker.check_help(args.help_from)
    if checker.problems:
        print('\n'.join(checker.problems))
        return 1
    print(f'{checker.links} links in {checker.files} files: all resolve')
    return 0


if __name__ == '__main__':
    sys.exit(main())
