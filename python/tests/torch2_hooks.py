"""torch 2.x's global hook APIs, emulated on an older torch, so that stallscope.auto's
global-hook code runs in tests on a machine that has only torch 1.13. Each helper is a context
manager that changes torch until it exits; use it only where the real API is missing
(`has_*()`): on torch 2.x the tests run against the real thing.

- forward_hooks_21(): torch 2.1's `register_module_forward_hook(hook, *, always_call=False)`,
  on top of the older torch's own global hook dicts, and a Module.__call__ that runs the hooks
  the way torch 2.3's Module._call_impl does: pre hooks, forward and post hooks inside an inner
  function; hooks registered with always_call=True run again from the except block (for an
  Exception only) when they did not run yet, and the error is re-raised.
- optimizer_hooks_20(): torch 2.0's `register_optimizer_step_pre_hook` / `_post_hook` and the
  step wrapper that calls them (Optimizer.profile_hook_step), put on each class at its first
  instance as 2.0's Optimizer._patch_step_function does. Post hooks do not run when step raises.
- compile_module_warning(): the warning a recent torch (2.11 did) prints at each call of a
  `torch.compile(module)` while any global module hook is registered:
  torch.nn.modules.module._has_any_global_hook() (reading the hook tables this torch has) and an
  OptimizedModule whose __call__ warns as torch/_dynamo/eval_frame.py's does, then runs
  Module.__call__ with a forward that calls the wrapped module (as its compiled forward does,
  minus the compiling). Yields that class.
"""

import collections
import contextlib
import functools
import importlib
import inspect
import warnings


def _module_mod():
    return importlib.import_module("torch.nn.modules.module")


def _optimizer_mod():
    return importlib.import_module("torch.optim.optimizer")


def has_always_call():
    """True when this torch's register_module_forward_hook takes always_call (torch >= 2.1)."""
    register = getattr(_module_mod(), "register_module_forward_hook", None)
    return register is not None and "always_call" in inspect.signature(register).parameters


def has_optimizer_hooks():
    """True when this torch has global optimizer step hooks (torch >= 2.0)."""
    return hasattr(_optimizer_mod(), "register_optimizer_step_pre_hook")


def _restore(owner, attr, had, old):
    if had:
        setattr(owner, attr, old)
    else:
        delattr(owner, attr)


@contextlib.contextmanager
def _replaced(owner, attr, value):
    had = attr in vars(owner)
    old = vars(owner).get(attr)
    setattr(owner, attr, value)
    try:
        yield
    finally:
        _restore(owner, attr, had, old)


@contextlib.contextmanager
def forward_hooks_21():
    import torch
    from torch.utils.hooks import RemovableHandle

    mod = _module_mod()
    pre_hooks, post_hooks = mod._global_forward_pre_hooks, mod._global_forward_hooks
    always_called = set()  # ids of post hooks registered with always_call=True

    def register_module_forward_hook(hook, *, always_call=False):
        handle = RemovableHandle(post_hooks)
        post_hooks[handle.id] = hook
        if always_call:
            always_called.add(handle.id)
        return handle

    def _call_impl(self, *args, **kwargs):
        if not (pre_hooks or post_hooks or self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        result = None
        called = set()

        def inner():
            nonlocal result, args
            for hook in (*pre_hooks.values(), *self._forward_pre_hooks.values()):
                new_args = hook(self, args)
                if new_args is not None:
                    args = new_args if isinstance(new_args, tuple) else (new_args,)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in (*post_hooks.items(), *self._forward_hooks.items()):
                if hook_id in always_called:
                    called.add(hook_id)
                new_result = hook(self, args, result)
                if new_result is not None:
                    result = new_result
            return result

        try:
            return inner()
        except Exception:
            for hook_id, hook in post_hooks.items():
                if hook_id in always_called and hook_id not in called:
                    try:
                        hook(self, args, result)
                    except Exception as e:
                        warnings.warn(f"always_call forward hook raised: {e}")
            raise

    with _replaced(mod, "register_module_forward_hook", register_module_forward_hook), \
            _replaced(torch.nn.Module, "__call__", _call_impl):
        yield


@contextlib.contextmanager
def optimizer_hooks_20():
    import torch
    from torch.utils.hooks import RemovableHandle

    mod = _optimizer_mod()
    pre_hooks, post_hooks = collections.OrderedDict(), collections.OrderedDict()

    def register(hooks):
        def register_hook(hook):
            handle = RemovableHandle(hooks)
            hooks[handle.id] = hook
            return handle
        return register_hook

    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self = args[0]
            for pre_hook in tuple(pre_hooks.values()):
                result = pre_hook(self, args, kwargs)
                if result is not None:
                    args, kwargs = result
            out = func(*args, **kwargs)
            for post_hook in tuple(post_hooks.values()):
                post_hook(self, args, kwargs)
            return out
        wrapper.emulated_torch20 = True
        return wrapper

    wrapped = []  # (class, had its own step, that step), to undo
    original_init = torch.optim.Optimizer.__init__

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        cls = type(self)  # 2.0 wraps self.__class__.step unless its step is already hooked
        if not getattr(cls.step, "emulated_torch20", False):
            wrapped.append((cls, "step" in vars(cls), vars(cls).get("step")))
            cls.step = profile_hook_step(cls.step)

    try:
        with _replaced(mod, "register_optimizer_step_pre_hook", register(pre_hooks)), \
                _replaced(mod, "register_optimizer_step_post_hook", register(post_hooks)), \
                _replaced(torch.optim.Optimizer, "__init__", __init__):
            yield
    finally:
        for cls, had, step in reversed(wrapped):
            _restore(cls, "step", had, step)


# torch/_dynamo/eval_frame.py, OptimizedModule.__call__ (torch 2.11 has it).
COMPILE_WARNING = (
    "Using `torch.compile(module)` when there are global hooks on modules (e.g., from "
    "`register_module_forward_hook`); this will cause the hooks to fire an extra time for the "
    "`OptimizedModule` created by `torch.compile(module)`. If this causes undesired behavior, "
    "please try using `module.compile()`, or use the per-module hooks instead")


def emulate_missing(testcase, optimizer=True):
    """Emulates the global hooks this torch lacks (the forward hooks before 2.1, the optimizer
    step hooks before 2.0 unless optimizer=False) for the rest of `testcase`, undone at its
    cleanup (after tearDown's uninstall). Returns the ExitStack, for more contexts."""
    stack = contextlib.ExitStack()
    testcase.addCleanup(stack.close)
    if not has_always_call():
        stack.enter_context(forward_hooks_21())
    if optimizer and not has_optimizer_hooks():
        stack.enter_context(optimizer_hooks_20())
    return stack


def has_global_hook_check():
    """True when this torch has _has_any_global_hook (and the warning)."""
    return hasattr(_module_mod(), "_has_any_global_hook")


@contextlib.contextmanager
def compile_module_warning():
    import torch

    mod = _module_mod()
    tables = [n for n in ("_global_backward_pre_hooks", "_global_backward_hooks",
                          "_global_forward_pre_hooks", "_global_forward_hooks",
                          "_global_forward_hooks_always_called",
                          "_global_forward_hooks_with_kwargs") if hasattr(mod, n)]
    namespace = {}
    # Defined in the module's own namespace, as torch's is: it reads the tables as globals.
    exec("def _has_any_global_hook():\n    return (%s)\n" % " or ".join(tables), vars(mod),
         namespace)

    class OptimizedModule(torch.nn.Module):
        def __init__(self, mod):
            super().__init__()
            self._orig_mod = mod

        def __call__(self, *args, **kwargs):
            if torch.nn.modules.module._has_any_global_hook():
                warnings.warn(COMPILE_WARNING, stacklevel=2)
            return super().__call__(*args, **kwargs)

        def forward(self, *args, **kwargs):
            return self._orig_mod(*args, **kwargs)

    with _replaced(mod, "_has_any_global_hook", namespace["_has_any_global_hook"]):
        yield OptimizedModule
