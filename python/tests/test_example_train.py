"""examples/train.py is a fair benchmark (issue 41): --transform-ms becomes a round count through
the cost of one round measured once per machine and stored, so two runs of one command do the
same work per sample; --transform-reps and --recalibrate as documented. Needs torch (Debian's
python3); skipped without it."""
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

SOURCE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           os.pardir, os.pardir))
HAS_TORCH = importlib.util.find_spec("torch") is not None and \
    importlib.util.find_spec("numpy") is not None


def load_train():
    spec = importlib.util.spec_from_file_location(
        "example_train", os.path.join(SOURCE_DIR, "examples", "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@unittest.skipUnless(HAS_TORCH, "this interpreter has no torch")
class TransformCalibrationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.train = load_train()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.data_dir = os.path.join(self.tmp.name, "data")
        self.measured = []

    def measure(self, ms):
        def measure():
            self.measured.append(ms)
            return ms
        return measure

    def rounds(self, *flags, measure_ms=0.25):
        """transform_rounds of train.py's arguments, with a stand-in measurement."""
        args = self.train.parse_args(["--data-dir", self.data_dir] + list(flags))
        real = self.train.measure_round_ms
        self.train.measure_round_ms = self.measure(measure_ms)
        try:
            out = io.StringIO()
            with redirect_stdout(out):
                reps = self.train.transform_rounds(args)
        finally:
            self.train.measure_round_ms = real
        return reps, out.getvalue()

    def stored(self):
        with open(os.path.join(self.data_dir, "transform-calibration.json")) as f:
            return json.load(f)

    def test_measured_once_then_every_run_does_the_same_work(self):
        reps, said = self.rounds("--situation", "data_cpu", measure_ms=0.25)  # 4 ms a sample
        self.assertEqual(reps, 16)
        self.assertIn("measured now", said)
        self.assertEqual(self.stored()["round_ms"], 0.25)
        # A later run on a busier (or quieter) machine does the same work: not measured again.
        again, said = self.rounds("--situation", "data_cpu", measure_ms=0.5)
        self.assertEqual(again, 16)
        self.assertIn("as measured before", said)
        self.assertEqual(self.measured, [0.25])
        # Another transform cost of the same machine: the same round cost.
        self.assertEqual(self.rounds("--situation", "oversub", measure_ms=0.5)[0], 4)

    def test_recalibrate_measures_again_and_stores_it(self):
        self.rounds("--transform-ms", "4", measure_ms=0.25)
        reps, said = self.rounds("--transform-ms", "4", "--recalibrate", measure_ms=0.5)
        self.assertEqual(reps, 8)
        self.assertIn("measured now", said)
        self.assertEqual(self.stored()["round_ms"], 0.5)

    def test_another_machines_or_a_damaged_file_is_measured_again(self):
        os.makedirs(self.data_dir)
        path = os.path.join(self.data_dir, "transform-calibration.json")
        other = dict(self.train.calibration_key(), host="another-host", round_ms=1.0)
        for content in (json.dumps(other), "{not json", json.dumps(dict(other, host=None)),
                        json.dumps(dict(self.train.calibration_key(), round_ms=-1))):
            with open(path, "w") as f:
                f.write(content)
            self.measured.clear()
            reps, _ = self.rounds("--transform-ms", "2", measure_ms=0.5)
            self.assertEqual(reps, 4, content)
            self.assertEqual(self.measured, [0.5], content)

    def test_transform_reps_is_taken_as_given_and_nothing_is_measured(self):
        reps, said = self.rounds("--situation", "data_cpu", "--transform-reps", "4")
        self.assertEqual((reps, said, self.measured), (4, "", []))
        self.assertFalse(os.path.exists(self.data_dir))
        self.assertEqual(self.rounds("--situation", "compute")[0], 0)  # no transform at all

    def test_ranks_started_together_measure_once(self):
        # Each process measures slowly and notes it; the lock makes the second wait and read.
        path = os.path.join(self.data_dir, "transform-calibration.json")
        log = os.path.join(self.tmp.name, "measured.log")
        code = (
            "import importlib.util, os, sys, time\n"
            f"spec = importlib.util.spec_from_file_location('t', {os.path.join(SOURCE_DIR, 'examples', 'train.py')!r})\n"
            "t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)\n"
            "def measure():\n"
            f"    open({log!r}, 'a').write('%d\\n' % os.getpid()); time.sleep(1); return 0.25\n"
            "t.measure_round_ms = measure\n"
            f"print(t.round_cost_ms({path!r})[0])\n")
        ranks = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  universal_newlines=True) for _ in range(2)]
        outs = [p.communicate(timeout=300)[0] for p in ranks]
        self.assertEqual([p.returncode for p in ranks], [0, 0])
        self.assertEqual(outs, ["0.25\n", "0.25\n"])
        with open(log) as f:
            self.assertEqual(len(f.read().split()), 1)

    def test_calibration_file_may_be_named(self):
        path = os.path.join(self.tmp.name, "elsewhere", "cal.json")
        self.rounds("--transform-ms", "1", "--calibration", path)
        with open(path) as f:
            self.assertEqual(json.load(f)["round_ms"], 0.25)


if __name__ == "__main__":
    unittest.main()
