#!/usr/bin/env python3
"""Tests of check_links.py on small trees in a temporary folder: python3 -m unittest
tools/check_links_test.py (or from tools/: python3 -m unittest check_links_test)."""

import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, 'check_links.py')
sys.path.insert(0, HERE)
import check_links  # noqa: E402


class Tree:
    """A temporary repository: write(path, text) creates files under it."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = self._tmp.name

    def write(self, rel, text, executable=False):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w', encoding='utf-8') as f:
            f.write(textwrap.dedent(text))
        if executable:
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def check(self, *extra):
        p = subprocess.run([sys.executable, SCRIPT] + list(extra) + [self.root],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        return p.returncode, p.stdout.strip().split('\n') if p.stdout.strip() else []

    def close(self):
        self._tmp.cleanup()


class CheckLinksTest(unittest.TestCase):
    def setUp(self):
        self.tree = Tree()
        self.addCleanup(self.tree.close)
        self.tree.write('docs/formats.md', """\
            # Formats

            ## Recording (JSON Lines), schema version 1

            ## `trace --json`, schema version 1
            """)

    def test_good_links_resolve(self):
        self.tree.write('README.md', """\
            # stallscope

            See [formats](docs/formats.md),
            [the recording](docs/formats.md#recording-json-lines-schema-version-1),
            [trace](docs/formats.md#trace---json-schema-version-1 "title"), [top](#stallscope),
            [a web page](https://example.com/x.md), and `docs/formats.md` in running text.
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 0, out)
        self.assertEqual(out, ['5 links in 2 files: all resolve'])

    def test_missing_file(self):
        self.tree.write('README.md', """\
            # stallscope

            The commands: [run](docs/commands/run.md).
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['README.md:3: link to missing file docs/commands/run.md'])

    def test_link_is_relative_to_the_linking_file(self):
        self.tree.write('docs/commands/run.md', """\
            # run

            [formats](../formats.md) and [wrong](docs/formats.md)
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['docs/commands/run.md:3: link to missing file docs/formats.md'])

    def test_missing_anchor(self):
        self.tree.write('README.md', """\
            # stallscope

            [recording](docs/formats.md#recording) and [here](#nowhere)
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['README.md:3: missing anchor #recording in docs/formats.md',
                               'README.md:3: missing anchor #nowhere in README.md'])

    def test_duplicate_headings_get_numbered_anchors(self):
        self.tree.write('docs/tests.md', """\
            # Tests

            ## Setup

            ## Setup

            ## Setup

            [first](#setup), [second](#setup-1), [third](#setup-2), [none](#setup-3)
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['docs/tests.md:9: missing anchor #setup-3 in docs/tests.md'])

    def test_links_in_fenced_code_are_not_checked(self):
        self.tree.write('README.md', """\
            # stallscope

            ```
            [not a link](docs/missing.md) docs/missing.md
            # not a heading
            ```

            ~~~sh
            see README-nodes.md
            ~~~

            [a heading in code is no anchor](#not-a-heading)
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['README.md:12: missing anchor #not-a-heading in README.md'])

    def test_bare_path_mentions_are_relative_to_root(self):
        self.tree.write('src/export/README.md', """\
            # src/export

            What `serve` publishes (README-serve.md lists every metric; `docs/formats.md` the
            rest; docs/formats.md#nowhere is wrong). `tests/fakes/nvml/README.md` is not checked.
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, [
            'src/export/README.md:3: link to missing file README-serve.md',
            'src/export/README.md:4: missing anchor #nowhere in docs/formats.md'])

    def test_link_text_may_wrap(self):
        self.tree.write('README.md', """\
            # stallscope

            As [docs/formats.md
              "Recording"](docs/formats.md#recording) says.
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['README.md:3: missing anchor #recording in docs/formats.md'])

    def write_bin(self, serve_help):
        return self.tree.write('bin/stallscope', f"""\
            #!/bin/sh
            case "$1" in
              --help) cat <<'EOF'
            stallscope: why is my GPU training slow?
            Usage: stallscope [OPTIONS] SUBCOMMAND

            Options:
              -h,--help                   Print this help message and exit

            Subcommands:
              record                      Sample GPUs and host (docs/formats.md)
              serve                       Serve metrics to Prometheus
                                          (a description that wraps)

            Run `stallscope COMMAND --help` for a command's options.
            EOF
              ;;
              record) echo "Format: docs/formats.md#recording-json-lines-schema-version-1" ;;
              serve) echo "{serve_help}" ;;
              *) echo "unknown command $1" >&2; exit 2 ;;
            esac
            """, executable=True)

    def test_help_from_a_binary_whose_help_names_a_missing_doc(self):
        binary = self.write_bin('Serve metrics; see README-serve.md and docs/commands/serve.md.')
        rc, out = self.tree.check('--help-from', binary)
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['stallscope serve --help:1: link to missing file README-serve.md',
                               'stallscope serve --help:1: link to missing file '
                               'docs/commands/serve.md'])

    def test_help_from_a_binary_whose_help_resolves(self):
        binary = self.write_bin('Serve metrics; see docs/formats.md.')
        rc, out = self.tree.check('--help-from', binary)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out, ['3 links in 4 files: all resolve'])

    def test_program_text_cites_only_documents_that_ship(self):
        # Issue 41: a rule's advice cited references/multinode.md, which exists nowhere.
        self.tree.write('docs/formats.md', '# Formats\n\n## Recording\n')
        self.tree.write('docs/internal/notes.md', '# Notes\n')
        self.tree.write('src/diagnose/README.md', '# diagnose\n')
        self.tree.write('src/diagnose/rules.cc', """\
            // A comment may cite references/nowhere.md: comments are not output.
            void CommRecs() {
              Rec(f, 2, "check NCCL's transport (references/multinode.md)");
              Rec(f, 1, "as docs/formats.md#recording says");  // fine
              Rec(f, 1, "docs/"
                        "formats.md#nowhere");  // joined, as the compiler joins them
              char quote = '"';
              Rec(f, 1, R"(see docs/internal/notes.md)");
              Rec(f, 0, "src/diagnose/README.md");
            }
            """)
        self.tree.write('src/diagnose/rules_test.cc', 'auto t = "references/test_only.md";\n')
        self.tree.write('python/stallscope/hooks.py', """\
            \"\"\"Docstrings may cite src/phase/README.md: they are not output.\"\"\"


            def warn():
                print(f"stallscope: see {'docs/missing.md'}")
            """)
        rc, out = self.tree.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, [
            'src/diagnose/rules.cc:3: link to missing file references/multinode.md',
            'src/diagnose/rules.cc:5: missing anchor #nowhere in docs/formats.md',
            'src/diagnose/rules.cc:8: cites docs/internal/notes.md, which does not ship '
            '(program output may cite README.md and docs/: tools/make_dist.sh)',
            'src/diagnose/rules.cc:9: cites src/diagnose/README.md, which does not ship '
            '(program output may cite README.md and docs/: tools/make_dist.sh)',
            'python/stallscope/hooks.py:5: link to missing file docs/missing.md'])

    def test_help_that_lists_no_command_is_an_error(self):
        binary = self.tree.write('bin/tool', """\
            #!/bin/sh
            echo "Usage: tool [OPTIONS]"
            echo "  -h,--help  Print this help message and exit"
            """, executable=True)
        rc, out = self.tree.check('--help-from', binary)
        self.assertEqual(rc, 1)
        self.assertEqual(out, [f'{binary} --help: found no commands in its output'])


class ParseTest(unittest.TestCase):
    def test_cpp_strings(self):
        text = ('a = "x" /* c */ "y";\nb = R"d(raw "q")d" "z";\nc = \'"\'; d = "e\\"f";\n'
                'e = 1\'000\'000; f = "g";\n')
        self.assertEqual(check_links.cpp_strings(text),
                         [(1, 'xy'), (2, 'raw "q"z'), (3, 'e\\"f'), (4, 'g')])

    def test_slugs(self):
        for heading, slug in [
                ('`stallscope top`', 'stallscope-top'),
                ('Bundle: run it on another Linux machine',
                 'bundle-run-it-on-another-linux-machine'),
                ('trace --json, schema version 1', 'trace---json-schema-version-1'),
                ('report.json, schema version 1', 'reportjson-schema-version-1'),
                ('Many nodes: `stallscope diagnose DIR1 DIR2 ...`',
                 'many-nodes-stallscope-diagnose-dir1-dir2-'),
                ('Start-up, warm-up and steady state', 'start-up-warm-up-and-steady-state'),
                ('snake_case and [a link](x.md)', 'snake_case-and-a-link')]:
            self.assertEqual(check_links.slug(heading), slug, heading)

    def test_commands_from_several_help_layouts(self):
        cli11 = ('Usage: x\n\nOptions:\n  -h,--help  Help\n\n'
                 'Subcommands:\n  top   Now\n  run   Wrap\n')
        self.assertEqual(check_links.parse_commands(cli11, 'x'), ['top', 'run'])
        greeting = ('stallscope: why is my GPU training slow?\n\nStart here:\n'
                    '  stallscope run -- python train.py\n\nCommands:\n'
                    '  stallscope top      GPUs now\n  stallscope doctor   Before a run\n')
        self.assertEqual(check_links.parse_commands(greeting, 'stallscope'), ['top', 'doctor'])
        no_header = 'usage: tool <command>\n\n   clone     Clone\n   init      Create\n'
        self.assertEqual(check_links.parse_commands(no_header, 'tool'), ['clone', 'init'])


if __name__ == '__main__':
    unittest.main()
