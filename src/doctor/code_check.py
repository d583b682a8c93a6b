# `stallscope doctor --code PATH`: a static check of training code for patterns that stall GPUs.
# Embedded into the binary (src/doctor/CMakeLists.txt) and run as `PYTHON -I -c <this> PATH`.
# Standard library only, pure `ast` (it never imports torch or the code it reads), Python 3.8+.
# It prints one line: STALLSCOPE_CODE_CHECK, a blank, then a JSON object (src/doctor/README.md).
import ast
import io
import json
import os
import stat
import sys
import tokenize

MARKER = "STALLSCOPE_CODE_CHECK"
SKIP_DIRS = {"venv", ".venv", "site-packages", "dist-packages", ".git", "__pycache__", ".tox",
             "node_modules"}
MAX_FILES = 5000
MAX_FILE_BYTES = 5 << 20
MAX_FINDINGS = 2000
MAX_WARNINGS = 100

# id -> (severity, why, fix). Severity "warn" costs GPU time every step; "info" is worth a look.
PATTERNS = {
    "dataloader-num-workers": (
        "warn",
        "DataLoader loads and collates batches in the training process (num_workers=0): the GPU "
        "waits while each batch is read and transformed",
        "pass num_workers=N (start at the CPU cores per GPU, e.g. 4-8; `stallscope doctor "
        "--workers N` checks the machine can take it)"),
    "dataloader-pin-memory": (
        "warn",
        "without pin_memory=True every host-to-GPU batch copy goes through pageable memory: "
        "slower, and it cannot overlap with compute",
        "pass pin_memory=True to the DataLoader (and non_blocking=True to .to(device))"),
    "dataloader-persistent-workers": (
        "info",
        "the DataLoader's worker processes are started again at every epoch (persistent_workers "
        "is False by default): a stall at each epoch start",
        "pass persistent_workers=True"),
    "loop-item": (
        "warn",
        ".item() in the training loop copies a GPU value to the host and waits for every queued "
        "kernel (a sync each step)",
        "keep the value on the GPU (loss.detach(), accumulate a tensor) and call .item() every N "
        "steps under an `if`"),
    "loop-cpu": (
        "warn",
        ".cpu() / .to('cpu') in the training loop waits for the GPU and copies to the host every "
        "step",
        "move logging and metrics off the per-step path (every N steps under an `if`, or on "
        "detached tensors after the epoch)"),
    "loop-numpy": (
        "warn",
        ".numpy() in the training loop forces a host copy of a tensor every step (a GPU sync)",
        "compute the metric with torch on the GPU; convert every N steps under an `if`"),
    "loop-tolist": (
        "warn",
        ".tolist() in the training loop copies a tensor to Python objects every step (a GPU sync)",
        "keep it a tensor; convert every N steps under an `if`"),
    "loop-print-tensor": (
        "warn",
        "printing a tensor in the training loop formats its value on the host: a GPU sync and a "
        "copy every step",
        "print every N steps under an `if` (e.g. `if step % 100 == 0:`)"),
    "loop-cuda-synchronize": (
        "warn",
        "torch.cuda.synchronize() in the training loop waits for every queued kernel each step: "
        "the CPU cannot run ahead to queue the next step",
        "remove it (time with CUDA events or `stallscope run`), or do it every N steps under an "
        "`if`"),
    "loop-empty-cache": (
        "warn",
        "torch.cuda.empty_cache() in the training loop syncs and returns cached memory to the "
        "driver, so the next step pays for cudaMalloc again",
        "remove it: PyTorch's caching allocator reuses the memory; it does not reduce what the "
        "process needs"),
    "empty-cache": (
        "info",
        "torch.cuda.empty_cache() does not free memory the program still holds; it only returns "
        "the cache to the driver, and later allocations pay for cudaMalloc again",
        "remove it unless another process on this GPU needs the memory"),
    "loop-save-every-step": (
        "warn",
        "torch.save() runs at every step of the training loop: the GPU idles while tensors are "
        "copied and written to disk",
        "save every N steps or once per epoch, under an `if`"),
    "zero-grad-set-to-none": (
        "info",
        "zero_grad() without set_to_none=True writes zeros into every gradient (a memset kernel "
        "per parameter); this only matters for torch < 2.0, where set_to_none defaults to False",
        "call zero_grad(set_to_none=True), or upgrade to torch >= 2.0"),
    "to-device-blocking": (
        "info",
        "the DataLoader pins memory, but this copy has no non_blocking=True: the CPU waits for "
        "each host-to-GPU copy instead of queueing the next kernels",
        "pass non_blocking=True: x.to(device, non_blocking=True)"),
    # Seed 003: a tf.numpy_function in the input pipeline gave a cyclic 2-40% GPU utilisation.
    "tf-py-function": (
        "warn",
        "tf.numpy_function / tf.py_function runs Python under the GIL: a tf.data map that calls it "
        "cannot run in parallel (num_parallel_calls does not help), so the GPU waits for input",
        "rewrite the function with TensorFlow ops (tf.image, tf.io, tf.strings) so tf.data can "
        "run it in parallel, or preprocess the data offline"),
    "cudnn-benchmark": (
        "info",
        "the file runs convolutions on CUDA but never sets torch.backends.cudnn.benchmark = "
        "True: cuDNN uses a heuristic instead of the fastest algorithm for each input shape",
        "set torch.backends.cudnn.benchmark = True once at start-up (when input shapes are "
        "fixed; with shapes that change every step it re-tunes and can be slower)"),
}

SYNC_METHODS = {"item": "loop-item", "cpu": "loop-cpu", "numpy": "loop-numpy",
                "tolist": "loop-tolist"}
LOOPS = (ast.For, ast.While, ast.AsyncFor)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
CONV_NAMES = {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
              "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"}
DTYPE_NAMES = {"float", "float16", "float32", "float64", "half", "bfloat16", "double", "int",
               "int8", "int16", "int32", "int64", "long", "uint8", "bool", "complex64"}


def attr_chain(node):
    """'torch.cuda.synchronize' for that expression; '' when it is not names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def method_name(call):
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def callee_name(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")


def keyword(call, name):
    """The keyword argument `name` of `call`: its value node, None when absent."""
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def has_star_kwargs(call):
    return any(k.arg is None for k in call.keywords)


def is_const(node, value):
    """True when `node` is the literal `value` (0 and False are told apart)."""
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and \
        node.value == value


def receiver_name(call):
    """'opt' for opt.step() and self.opt.step(); '' otherwise."""
    if not isinstance(call.func, ast.Attribute):
        return ""
    v = call.func.value
    if isinstance(v, ast.Name):
        return v.id
    if isinstance(v, ast.Attribute):
        return v.attr
    return ""


def is_trigger(call):
    """A call that marks a training step: x.backward(...) or an optimizer's .step()."""
    m = method_name(call)
    if m == "backward":
        return True
    if m == "step":
        r = receiver_name(call).lower()
        return "optim" in r or r in ("opt", "scaler") or r.startswith("opt_")
    return False


def walk_scope(node):
    """The nodes under `node`, not entering nested functions, lambdas and classes."""
    pending = list(ast.iter_child_nodes(node))
    while pending:
        n = pending.pop()
        yield n
        if not isinstance(n, SCOPES):
            pending.extend(ast.iter_child_nodes(n))


class FileFacts(object):
    """What the rules need to know about the whole file."""

    def __init__(self, tree):
        self.uses_cuda = False
        self.uses_conv = False
        self.sets_benchmark = False
        self.pins_memory = False
        self.loaders = []
        self.tensor_names = set()
        self.model_names = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                if n.value == "cuda" or n.value.startswith("cuda:"):
                    self.uses_cuda = True
            elif isinstance(n, ast.Attribute):
                if n.attr == "cuda" and attr_chain(n.value) == "torch":
                    self.uses_cuda = True
                if n.attr in CONV_NAMES:
                    self.uses_conv = True
            elif isinstance(n, ast.Name) and n.id in CONV_NAMES:
                self.uses_conv = True
            elif isinstance(n, ast.Assign):
                if any(attr_chain(t).endswith("cudnn.benchmark") for t in n.targets) and \
                        not is_const(n.value, False):
                    self.sets_benchmark = True
            elif isinstance(n, ast.Call):
                self._call(n)

    def _call(self, n):
        m = method_name(n)
        if m == "cuda":
            self.uses_cuda = True
        if callee_name(n) == "DataLoader":
            self.loaders.append(n)
            if is_const(keyword(n, "pin_memory"), True):
                self.pins_memory = True
        if m == "backward" and isinstance(n.func.value, ast.Name):
            self.tensor_names.add(n.func.value.id)
        if m in ("parameters", "train", "eval", "named_parameters", "state_dict"):
            r = receiver_name(n)
            if r and r not in ("self",):
                self.model_names.add(r)


def training_loops(tree):
    """The innermost loop around each training-step call (backward, optimizer.step)."""
    found = []

    def visit(node, loop):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, SCOPES):
                visit(child, None)
                continue
            if isinstance(child, ast.Call) and is_trigger(child) and loop is not None:
                if not any(loop is f for f in found):
                    found.append(loop)
            visit(child, child if isinstance(child, LOOPS) else loop)

    visit(tree, None)
    return found


def every_step_nodes(loop):
    """(node, guarded) under the loop's body; guarded: inside an `if` or `try` handler there."""
    pending = [(s, False) for s in loop.body]
    while pending:
        n, guarded = pending.pop()
        yield n, guarded
        if isinstance(n, SCOPES):
            continue
        if isinstance(n, ast.If):
            pending.append((n.test, guarded))
            pending.extend((s, True) for s in n.body + n.orelse)
        elif isinstance(n, ast.Try):
            pending.extend((s, guarded) for s in n.body + n.finalbody)
            pending.extend((s, True) for s in n.orelse)
            pending.extend((h, True) for h in n.handlers)
        elif isinstance(n, ast.IfExp):
            pending.append((n.test, guarded))
            pending.extend([(n.body, True), (n.orelse, True)])
        else:
            pending.extend((c, guarded) for c in ast.iter_child_nodes(n))


META_ATTRS = {"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "grad_fn"}
META_CALLS = {"size", "dim", "numel", "len", "type", "isinstance", "id", "str"}


def tensor_ref(node, names):
    """True when `node` reads the value of a tensor in `names` (not its shape, dtype, ...)."""
    if isinstance(node, ast.Attribute) and node.attr in META_ATTRS:
        return False
    if isinstance(node, ast.Call) and callee_name(node) in META_CALLS:
        return False
    if isinstance(node, ast.Name):
        return node.id in names
    return any(tensor_ref(c, names) for c in ast.iter_child_nodes(node))


def has_sync_call(node):
    return any(isinstance(n, ast.Call) and method_name(n) in SYNC_METHODS for n in ast.walk(node))


class Checker(object):
    def __init__(self, path, source, tree):
        self.path = path
        try:  # the file's own encoding (PEP 263), for the line shown with each finding
            encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0]
        except (SyntaxError, LookupError):
            encoding = "utf-8"
        self.lines = source.decode(encoding, "replace").splitlines()
        self.tree = tree
        self.facts = FileFacts(tree)
        self.findings = []
        self.seen = set()

    def add(self, pid, node):
        line = getattr(node, "lineno", 0)
        if (pid, line) in self.seen:
            return
        self.seen.add((pid, line))
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        severity, why, fix = PATTERNS[pid]
        self.findings.append({"file": self.path, "line": line, "id": pid, "severity": severity,
                              "why": why, "fix": fix, "source": text[:160]})

    def run(self):
        self.check_loaders()
        loop_nodes = set()
        for loop in training_loops(self.tree):
            tensors = self.loop_tensors(loop)
            for n, guarded in every_step_nodes(loop):
                loop_nodes.add(id(n))
                if isinstance(n, ast.Call):
                    self.check_loop_call(n, guarded, tensors)
        for n in ast.walk(self.tree):
            if not isinstance(n, ast.Call):
                continue
            if method_name(n) == "zero_grad":
                v = keyword(n, "set_to_none")
                if v is None or is_const(v, False):
                    self.add("zero-grad-set-to-none", n)
            chain = attr_chain(n.func)
            if chain.endswith("cuda.empty_cache") and id(n) not in loop_nodes:
                self.add("empty-cache", n)
            if chain.split(".")[0] in ("tf", "tensorflow") and \
                    chain.endswith((".numpy_function", ".py_function")):
                self.add("tf-py-function", n)
        f = self.facts
        if f.uses_conv and f.uses_cuda and not f.sets_benchmark:
            self.add("cudnn-benchmark", self.first_conv())
        self.findings.sort(key=lambda d: (d["line"], d["id"]))
        return self.findings

    def first_conv(self):
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Attribute) and n.attr in CONV_NAMES or \
                    isinstance(n, ast.Name) and n.id in CONV_NAMES:
                return n
        return self.tree

    def check_loaders(self):
        for call in self.facts.loaders:
            if has_star_kwargs(call):
                continue  # its options come from a dict we cannot read
            # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
            # collate_fn, pin_memory, ...): positional arguments count too.
            workers = keyword(call, "num_workers")
            if workers is None and len(call.args) > 5:
                workers = call.args[5]
            if workers is None or is_const(workers, 0):
                self.add("dataloader-num-workers", call)
            elif keyword(call, "persistent_workers") is None:
                self.add("dataloader-persistent-workers", call)
            pin = keyword(call, "pin_memory")
            if pin is None and len(call.args) > 7:
                pin = call.args[7]
            if self.facts.uses_cuda and (pin is None or is_const(pin, False)):
                self.add("dataloader-pin-memory", call)

    def loop_tensors(self, loop):
        """Names that hold tensors in the loop: what .backward() is called on, and what is
        assigned from the model's output or from those."""
        names = set(self.facts.tensor_names)
        models = self.facts.model_names
        for _ in range(3):  # assignments chain: out = model(x); loss = crit(out, y)
            for n in walk_scope(loop):
                if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Call, ast.BinOp)):
                    calls_model = any(isinstance(c, ast.Call) and callee_name(c) in models
                                      for c in ast.walk(n.value))
                    if has_sync_call(n.value):
                        continue  # x = loss.item(): a Python number (the .item() is reported)
                    if calls_model or tensor_ref(n.value, names):
                        for t in n.targets:
                            for x in ast.walk(t):
                                if isinstance(x, ast.Name):
                                    names.add(x.id)
        return names

    def check_loop_call(self, n, guarded, tensors):
        m = method_name(n)
        chain = attr_chain(n.func)
        if not guarded:
            if m in SYNC_METHODS and not n.args:
                inner = n.func.value
                if m == "numpy" and isinstance(inner, ast.Call) and method_name(inner) == "cpu":
                    return  # x.cpu().numpy(): the .cpu() finding covers it
                self.add(SYNC_METHODS[m], n)
            elif m == "to" and n.args and isinstance(n.args[0], ast.Constant) and \
                    n.args[0].value == "cpu":
                self.add("loop-cpu", n)
            elif chain.endswith("cuda.synchronize"):
                self.add("loop-cuda-synchronize", n)
            elif chain.endswith("cuda.empty_cache"):
                self.add("loop-empty-cache", n)
            elif chain == "torch.save":
                self.add("loop-save-every-step", n)
            elif isinstance(n.func, ast.Name) and n.func.id == "print":
                if any(tensor_ref(a, tensors) and not has_sync_call(a) for a in n.args):
                    self.add("loop-print-tensor", n)
        if m in ("to", "cuda") and self.facts.pins_memory and self.is_batch_copy(n):
            if not is_const(keyword(n, "non_blocking"), True):
                self.add("to-device-blocking", n)

    def is_batch_copy(self, n):
        """x.to(device) / x.cuda() on a batch tensor (not the model, not a dtype cast)."""
        if receiver_name(n) in self.facts.model_names or receiver_name(n) == "self":
            return False
        if method_name(n) == "cuda":
            return True
        if not n.args or keyword(n, "memory_format") is not None:
            return False
        a = n.args[0]
        if isinstance(a, ast.Constant):
            return isinstance(a.value, str) and a.value.startswith("cuda")
        if isinstance(a, ast.Attribute) and attr_chain(a.value) == "torch" and \
                a.attr in DTYPE_NAMES:
            return False
        return isinstance(a, (ast.Name, ast.Attribute, ast.Call))


class NotChecked(Exception):
    """A file the analyzer did not read or parse; the message says why."""


def file_kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def python_files(root, not_checked):
    """(files, extra): the files to check under `root` (itself when it is not a directory), at
    most MAX_FILES, and how many more there were. A folder that cannot be listed, and the extra
    files, are added to `not_checked` as (path, line, reason)."""
    if not os.path.isdir(root):
        return [root], 0
    out = []
    extra = [0]

    def cannot_list(e):
        not_checked.append((e.filename or root, 0, "cannot list: %s" % e.strerror))

    for d, dirs, files in os.walk(root, onerror=cannot_list):
        dirs[:] = sorted(x for x in dirs
                         if x not in SKIP_DIRS and
                         not os.path.exists(os.path.join(d, x, "pyvenv.cfg")))
        for f in sorted(files):
            if f.endswith(".py"):
                if len(out) < MAX_FILES:
                    out.append(os.path.join(d, f))
                else:
                    extra[0] += 1
    if extra[0]:
        not_checked.append((root, 0, "more than %d .py files: %d were not checked" %
                            (MAX_FILES, extra[0])))
    return out, extra[0]


def read_source(path):
    """The file's bytes, read with a bound. Raises NotChecked: a symlink may lead anywhere
    (/dev/zero, a FIFO), so only a regular file (after links) of at most MAX_FILE_BYTES is
    read, and the bound holds even when the file grows between the check and the read."""
    try:
        st = os.stat(path)  # follows symlinks: a link to a regular file is checked
        if not stat.S_ISREG(st.st_mode):
            raise NotChecked("%s, not a regular file" % file_kind(st.st_mode))
        # O_NONBLOCK: should the path become a FIFO after the stat, open must not wait on it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise NotChecked("cannot read: %s" % (e.strerror or e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotChecked("%s, not a regular file" % file_kind(st.st_mode))
        chunks = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_FILE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise NotChecked("larger than %d MiB" % (MAX_FILE_BYTES >> 20))
        return b"".join(chunks)
    except OSError as e:
        raise NotChecked("cannot read: %s" % (e.strerror or e))
    finally:
        os.close(fd)


def check_file(path, findings):
    """Adds the file's findings; raises NotChecked when it could not be read or parsed."""
    source = read_source(path)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise NotChecked("SyntaxError: %s" % e.msg, e.lineno or 0)
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as e:
        raise NotChecked(("%s: %s" % (type(e).__name__, e)) if str(e) else type(e).__name__)
    try:
        findings.extend(Checker(path, source, tree).run())
    except RecursionError:
        raise NotChecked("nested too deeply")


def main(argv):
    not_checked = []  # (path, line, reason)
    findings = []
    checked = 0
    more = 0  # files beyond MAX_FILES, not checked
    for root in argv:
        files, extra = python_files(root, not_checked)
        more += extra
        for path in files:
            try:
                check_file(path, findings)
                checked += 1
            except NotChecked as e:
                not_checked.append((path, e.args[1] if len(e.args) > 1 else 0, e.args[0]))
    warnings = [{"file": f, "line": line, "message": why} for f, line, why in not_checked]
    out = {"python": "%d.%d.%d" % sys.version_info[:3], "files_checked": checked,
           "files_not_checked": len(not_checked) - (1 if more else 0) + more,
           "findings": findings[:MAX_FINDINGS], "truncated": len(findings) > MAX_FINDINGS,
           "warnings": warnings[:MAX_WARNINGS]}
    sys.stdout.write(MARKER + " " + json.dumps(out) + "\n")
    sys.stdout.flush()


main(sys.argv[1:])
