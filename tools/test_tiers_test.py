#!/usr/bin/env python3
"""Tests of test_tiers.sh (`make test`'s runner) on a stand-in Makefile whose tiers pass, fail
with ctest's list of failed tests, or fail to build: python3 -m unittest tools/test_tiers_test.py
(or from tools/: python3 -m unittest test_tiers_test)."""

import os
import subprocess
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, 'test_tiers.sh')

# Each tier prints what ctest or a build prints, and leaves a mark that it ran.
MAKEFILE = textwrap.dedent('''\
    passes:
    \t@touch ran-passes; echo "100% tests passed, 0 tests failed out of 3"
    fails:
    \t@touch ran-fails
    \t@printf '97%% tests passed, 2 tests failed out of 70\\n\\nThe following tests FAILED:\\n'
    \t@printf '\\t 12 - TopTui.RunRow (Failed)\\n\\t 13 - Serve.Scrape (Timeout)\\n'
    \t@echo "Errors while running CTest"; exit 8
    breaks:
    \t@touch ran-breaks; echo "FAILED: src/x.cc.o"; echo "x.cc:1:2: error: boom"; exit 1
    ''')


class TestTiers(unittest.TestCase):
    def run_tiers(self, *tiers):
        self.tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(self.tmp.name, 'Makefile'), 'w') as f:
            f.write(MAKEFILE)
        env = dict(os.environ, MAKE='make')
        env.pop('MAKEFLAGS', None)
        env.pop('MFLAGS', None)
        p = subprocess.run([SCRIPT, 'logs'] + list(tiers), cwd=self.tmp.name, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        self.addCleanup(self.tmp.cleanup)
        return p.returncode, p.stdout

    def summary(self, out):
        return out[out.index('==== make test:'):]

    def test_every_tier_runs_after_a_failure_and_one_summary_lists_all(self):
        rc, out = self.run_tiers('fails', 'breaks', 'passes')
        self.assertEqual(rc, 1, out)
        for tier in ('fails', 'breaks', 'passes'):
            self.assertTrue(os.path.exists(os.path.join(self.tmp.name, 'ran-' + tier)), tier)
            self.assertTrue(os.path.exists(os.path.join(self.tmp.name, 'logs', tier + '.log')))
        summary = self.summary(out)
        self.assertIn('==== make test: 3 tiers, 2 failed', summary)
        self.assertRegex(summary, r'\n  fails +FAILED +\d+ s, 70 tests \(exit 2; log: logs/fails.log\)')
        self.assertIn('\n                  TopTui.RunRow (Failed)\n', summary)
        self.assertIn('\n                  Serve.Scrape (Timeout)\n', summary)
        self.assertRegex(summary, r'\n  breaks +FAILED .*\n +FAILED: src/x.cc.o\n')
        self.assertRegex(summary, r'\n  passes +ok +\d+ s, 3 tests\n')
        self.assertEqual(out.count('==== make test:'), 1)

    def test_all_passing_exits_zero(self):
        rc, out = self.run_tiers('passes', 'passes')
        self.assertEqual(rc, 0, out)
        self.assertIn('==== make test: 2 tiers, 0 failed', out)
        self.assertNotIn('FAILED', out)

    def test_usage(self):
        p = subprocess.run([SCRIPT, 'logs'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn('usage: tools/test_tiers.sh LOG_DIR TIER...', p.stderr)


if __name__ == '__main__':
    unittest.main()
