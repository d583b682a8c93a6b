"""Tests for python/stallscope/_protocol.py, the one declaration of the names the Python side
writes (phases, counters, info kinds and keys, python.jsonl notes, the environment): its format
stays readable by a regular expression (a C++ contract test reads it that way), its tuples agree
with its constants, the writers write exactly the declared keys, and no other module spells one
of these names as a literal. No torch needed: stand-ins play its part.

    python3 -m unittest -v test_protocol            (cwd: python/tests)
"""

import ast
import glob
import json
import os
import re
import tempfile
import types
import unittest
import unittest.mock

from test_auto import PHASE_KEYS, PYTHON_DIR  # noqa: E402  (puts python/ on sys.path)
from stallscope import (_exp_loader_set, _experiment, _facts, _life, _notes,  # noqa: E402
                        _protocol, _startup, _syncs, auto)

PACKAGE_DIR = os.path.join(PYTHON_DIR, "stallscope")
PROTOCOL_FILE = os.path.join(PACKAGE_DIR, "_protocol.py")
P = _protocol

STRING = r'"[^"\\\n]*"'
# What a C++ test can do with std::regex: NAME = "value" | ( strings ) | { "key": ( strings ) }.
ASSIGNMENT = re.compile(r'^([A-Z][A-Z0-9_]*) = (' + STRING + r'|\((?:[^()"]|' + STRING
                        + r')*\)|\{(?:[^{}"]|' + STRING + r')*\})', re.M)


def declared():
    """{name: value} of _protocol.py read as a C++ test would: comments dropped, then regexes."""
    with open(PROTOCOL_FILE) as f:
        text = "".join(line.split("#", 1)[0].rstrip() + "\n" for line in f)
    names = {}
    for match in ASSIGNMENT.finditer(text):
        name, value = match.groups()
        if value.startswith('"'):
            names[name] = value[1:-1]
        elif value.startswith("("):
            names[name] = tuple(re.findall(r'"([^"]*)"', value))
        else:
            names[name] = {key: tuple(re.findall(r'"([^"]*)"', items)) for key, items in
                           re.findall(r'"([^"]*)"\s*:\s*\(([^()]*)\)', value)}
    return names


def constants(prefix, exclude=()):
    return {getattr(P, n) for n in dir(P) if n.startswith(prefix) and n not in exclude}


class FormatTest(unittest.TestCase):
    def test_only_plain_assignments_of_string_literals(self):
        with open(PROTOCOL_FILE) as f:
            tree = ast.parse(f.read())

        def strings(node):
            return isinstance(node, ast.Tuple) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)

        for node in tree.body:
            with self.subTest(line=node.lineno):
                self.assertIsInstance(node, ast.Assign, "only NAME = value statements")
                self.assertEqual(len(node.targets), 1)
                self.assertIsInstance(node.targets[0], ast.Name)
                self.assertRegex(node.targets[0].id, r"^[A-Z][A-Z0-9_]*$")
                value = node.value
                ok = ((isinstance(value, ast.Constant) and isinstance(value.value, str))
                      or strings(value)
                      or (isinstance(value, ast.Dict) and all(
                          isinstance(k, ast.Constant) and isinstance(k.value, str)
                          for k in value.keys) and all(strings(v) for v in value.values)))
                self.assertTrue(ok, ast.dump(value))

    def test_the_regex_reading_finds_every_constant_with_its_value(self):
        public = {n: getattr(P, n) for n in dir(P) if not n.startswith("_")}
        self.assertEqual(declared(), public)

    def test_no_string_needs_escaping(self):
        for name, value in declared().items():
            items = [value] if isinstance(value, str) else (
                list(value) if isinstance(value, tuple)
                else [s for k, v in value.items() for s in (k, *v)])
            for item in items:
                with self.subTest(name=name, item=item):
                    self.assertNotRegex(item, r'["\\#\n]')

    def test_the_header_says_who_reads_it(self):
        with open(PROTOCOL_FILE) as f:
            head = f.read(2000)
        self.assertIn("READ BY A C++ CONTRACT TEST", head)


class ConsistencyTest(unittest.TestCase):
    """Each tuple repeats its constants' literals: they must agree."""

    def test_groups(self):
        self.assertEqual(set(P.PHASES), constants("PHASE_"))
        self.assertEqual(len(P.PHASES), len(set(P.PHASES)))
        self.assertLessEqual(set(P.GPU_TIMED_PHASES), set(P.PHASES))
        self.assertEqual(set(P.HOST_SYNC_KINDS), constants("SYNC_", ("SYNC_SITES_ENTRY_KEYS",)))
        self.assertEqual(set(P.COUNTERS), constants("COUNTER_"))
        self.assertEqual(set(P.INFO_KINDS),
                         constants("INFO_", ("INFO_KINDS", "INFO_KEYS", "INFO_OPTIONAL_KEYS")))
        self.assertEqual(set(P.NOTE_EVENTS),
                         constants("NOTE_", ("NOTE_EVENTS", "NOTE_KEYS", "NOTE_ENVELOPE_KEYS")))
        self.assertEqual(set(P.BACKENDS), constants("BACKEND_"))
        self.assertEqual(set(P.MECHANISMS), constants("MECH_"))

    def test_keys(self):
        tables = [*P.INFO_KEYS.values(), *P.NOTE_KEYS.values(), P.NOTE_ENVELOPE_KEYS,
                  P.START_FLAGS_KEYS, P.SYNC_SITES_ENTRY_KEYS, P.LOADER_SET_KEYS]
        self.assertEqual({key for table in tables for key in table}, constants("KEY_"))
        for table in tables:
            self.assertEqual(len(table), len(set(table)), table)
        self.assertEqual(tuple(P.INFO_KEYS), P.INFO_KINDS)
        self.assertEqual(tuple(P.NOTE_KEYS), P.NOTE_EVENTS)
        for kind, optional in P.INFO_OPTIONAL_KEYS.items():
            self.assertLessEqual(set(optional), set(P.INFO_KEYS[kind]))
        self.assertEqual(tuple(P.EXPERIMENT_KEYS), P.EXPERIMENT_ENV)
        self.assertEqual(sum(P.EXPERIMENT_KEYS.values(), ()), P.INFO_KEYS[P.INFO_EXPERIMENT])
        self.assertLessEqual(set(P.LOADER_SET_KEYS), set(P.INFO_KEYS[P.INFO_DATALOADER]))

    def test_environment(self):
        env = constants("ENV_", ("ENV_FLAGS",))
        self.assertLessEqual(set(P.ENV_FLAGS) | set(P.EXPERIMENT_ENV), env)
        self.assertTrue(all(name.startswith("STALLSCOPE_") for name in env))

    def test_mechanism_keys_are_the_installers(self):
        self.assertEqual(list(P.MECHANISM_KEYS), PHASE_KEYS)
        self.assertEqual({P.MECHANISM_HOST_SYNCS, P.MECHANISM_GPU_TIME},
                         set(P.MECHANISM_KEYS) - set(P.PHASES))


class FakeTorch:
    __version__ = "9.9.9"
    __file__ = os.path.join(tempfile.gettempdir(), "faketorch", "__init__.py")
    backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(benchmark=True,
                                                                 deterministic=False))
    cuda = types.SimpleNamespace(is_initialized=lambda: False)

    @staticmethod
    def get_num_threads():
        return 4

    @staticmethod
    def get_num_interop_threads():
        return 2

    @staticmethod
    def get_float32_matmul_precision():
        return "highest"


class WritersTest(unittest.TestCase):
    """The writers write exactly the declared keys, in the declared order."""

    def test_torch_and_backends(self):
        self.assertEqual(tuple(_facts.process(FakeTorch)), P.INFO_KEYS[P.INFO_TORCH])
        self.assertEqual(tuple(_facts.backends(FakeTorch)), P.INFO_KEYS[P.INFO_BACKENDS])

    def test_dataloader(self):
        class Loader:
            dataset = [1, 2, 3]
            num_workers = 0

        class Iterator:
            _workers = [types.SimpleNamespace(pid=11)]

        reporter = _facts.LoaderReporter()
        loader = Loader()
        kind, data = reporter.seen(loader, object(), lambda: 4)
        self.assertEqual((kind, tuple(data)), (P.INFO_DATALOADER, P.INFO_KEYS[P.INFO_DATALOADER]))
        kind, data = reporter.seen(loader, Iterator(), lambda: 4)
        self.assertEqual((kind, tuple(data)),
                         (P.INFO_DATALOADER_WORKERS, P.INFO_KEYS[P.INFO_DATALOADER_WORKERS]))

    def test_start_up_records(self):
        infos = []
        life = _life.Life(lambda kind, data: infos.append((kind, tuple(data))),
                          lambda where, e: self.fail(f"{where}: {e}"), lambda: False)
        state = {"initialized": False}
        cuda = types.SimpleNamespace(is_initialized=lambda: state["initialized"])
        cuda._lazy_init = life.wrap_lazy_init(cuda)(lambda: state.update(initialized=True))
        cuda._lazy_init()
        life.on_compile_start(types.SimpleNamespace(callback_trigger=types.SimpleNamespace(
            name="DYNAMO")))
        life.on_compile_end()
        life.finish()
        self.assertEqual(infos, [(P.INFO_CUDA_INIT, P.INFO_KEYS[P.INFO_CUDA_INIT]),
                                 (P.INFO_COMPILE, P.INFO_KEYS[P.INFO_COMPILE]),
                                 (P.INFO_COMPILE_TOTALS, P.INFO_KEYS[P.INFO_COMPILE_TOTALS])])

    def test_sync_sites(self):
        counts, infos = [], []
        counter = _syncs.SyncCounter(FakeTorch, lambda name, n: counts.append(name),
                                     lambda kind, data: infos.append((kind, data)), lambda: True)
        # A call from an installed library's frame: the site also names the job's line.
        library = {"hit": lambda: counter.hit(P.SYNC_ITEM, 1)}
        exec(compile("def call():\n    hit()\n", "/x/site-packages/lib.py", "exec"), library)
        library["call"]()
        counter.finish()
        self.assertEqual(counts, [P.HOST_SYNC_PREFIX + P.SYNC_ITEM])
        self.assertEqual([(kind, tuple(data)) for kind, data in infos],
                         [(P.INFO_SYNC_SITE, P.INFO_KEYS[P.INFO_SYNC_SITE]),
                          (P.INFO_SYNC_SITES, P.INFO_KEYS[P.INFO_SYNC_SITES])])
        self.assertEqual(tuple(infos[1][1][P.KEY_SITES][0]), P.SYNC_SITES_ENTRY_KEYS)

    def test_experiment(self):
        with tempfile.TemporaryDirectory() as scratch, unittest.mock.patch.object(_notes, "say"):
            environ = {P.ENV_STOP_AFTER_STEPS: "3", P.ENV_SYNTHETIC_DATA: "2",
                       P.ENV_SIDE_WORK_OFF: "1", P.ENV_SCRATCH_DIR: scratch,
                       P.ENV_LOADER_SET: '{"num_workers": 1, "batch_size": 2, "pin_memory": true,'
                                         ' "prefetch_factor": 2, "persistent_workers": true}'}
            experiment = _experiment.from_env(environ, lambda: None)
        info = experiment.info()
        self.assertEqual(tuple(info), P.INFO_KEYS[P.INFO_EXPERIMENT])
        self.assertEqual(set(info[P.KEY_LOADER_SET]), set(P.LOADER_SET_KEYS))  # as the job wrote
        self.assertEqual(tuple(_exp_loader_set.KEYS), P.LOADER_SET_KEYS)
        self.assertEqual(_experiment.ENV_ALL, P.EXPERIMENT_ENV)
        for control, env in zip(experiment.controls, P.EXPERIMENT_ENV):
            self.assertEqual(tuple(control.info()), P.EXPERIMENT_KEYS[env])

    def notes(self, run_dir):
        with open(os.path.join(run_dir, P.NOTES_FILE)) as f:
            return [json.loads(line) for line in f]

    def test_notes(self):
        import stallscope
        fields = _startup.interpreter()
        self.assertEqual(tuple(fields[P.KEY_FLAGS]), P.START_FLAGS_KEYS)
        with tempfile.TemporaryDirectory() as run_dir, \
                unittest.mock.patch.dict(os.environ, {P.ENV_RUN_DIR: run_dir}), \
                unittest.mock.patch.object(_startup, "_started", False), \
                unittest.mock.patch.object(_startup, "watch_imports"):
            _startup.start(stallscope)
            auto._note_hooks(FakeTorch, {}, None)
            notes = self.notes(run_dir)
        start, hooks = notes
        self.assertEqual(tuple(start), P.NOTE_ENVELOPE_KEYS + P.NOTE_KEYS[P.NOTE_START])
        self.assertEqual(start[P.KEY_EVENT], P.NOTE_START)
        self.assertEqual(tuple(hooks), P.NOTE_ENVELOPE_KEYS + P.NOTE_KEYS[P.NOTE_HOOKS])
        self.assertEqual(hooks[P.KEY_EVENT], P.NOTE_HOOKS)


class NoLiteralsTest(unittest.TestCase):
    """Every other module uses the constants: a name of _protocol.py spelled as a literal there
    would drift unseen."""

    # A name that is a plain word elsewhere: the module torch (also info "torch"'s kind).
    ALLOWED = {"torch"}
    # Calls whose string arguments are attribute names (torch.backends is not info "backends").
    ATTRIBUTE_CALLS = ("getattr", "hasattr", "setattr", "delattr")

    def modules(self):
        for path in sorted(glob.glob(os.path.join(PACKAGE_DIR, "*.py"))):
            if os.path.basename(path) != "_protocol.py":
                with open(path) as f:
                    yield os.path.basename(path), ast.parse(f.read())

    @staticmethod
    def builds_a_record(func):
        """record.update(key=...), dict(key=...), note(event, key=...)."""
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return name in ("update", "dict", "note", "info")

    def test_no_name_spelled_as_a_literal(self):
        words = (set(P.PHASES) | set(P.INFO_KINDS) | set(P.NOTE_EVENTS) | set(P.COUNTERS)
                 | set(P.MECHANISMS) | set(P.MECHANISM_KEYS) | constants("ENV_", ("ENV_FLAGS",))
                 | {P.HOST_SYNC_PREFIX, P.NOT_MEASURED, P.NOTES_FILE}) - self.ALLOWED
        for name, tree in self.modules():
            attributes = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                          and getattr(node.func, "id", None) in self.ATTRIBUTE_CALLS
                          for arg in node.args[1:2]}
            found = sorted({(node.lineno, node.value) for node in ast.walk(tree)
                            if isinstance(node, ast.Constant) and node.value in words
                            and id(node) not in attributes})
            self.assertEqual(found, [], name)

    def test_no_key_spelled_as_a_literal_where_records_are_built(self):
        keys = constants("KEY_")
        for name, tree in self.modules():
            found = []
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict):  # {"key": value}
                    found += [(k.lineno, k.value) for k in node.keys
                              if isinstance(k, ast.Constant) and k.value in keys]
                elif isinstance(node, ast.Subscript):  # record["key"]
                    index = node.slice
                    if type(index).__name__ == "Index":  # Python 3.8
                        index = index.value
                    if isinstance(index, ast.Constant) and index.value in keys:
                        found.append((node.lineno, index.value))
                elif isinstance(node, ast.Call) and self.builds_a_record(node.func):
                    found += [(node.lineno, kw.arg) for kw in node.keywords if kw.arg in keys]
            self.assertEqual(found, [], name)


if __name__ == "__main__":
    unittest.main()
