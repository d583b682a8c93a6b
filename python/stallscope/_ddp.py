"""DDP's all-reduce wait, "comm_wait", for stallscope.auto.

DistributedDataParallel all-reduces gradient buckets asynchronously while autograd still computes
the remaining gradients; once the last gradient is computed, backward() only waits for the
outstanding all-reduces and copies the averaged gradients back. So [last gradient ready,
backward returns] is the exposed communication wait. When the outermost module call is a DDP
model, GradientWatch puts a gradient hook on each of its parameters that notes when a gradient is
ready; auto's backward_pass patch then records backward_pass up to the last one and comm_wait
from there until backward returns. With gloo on CPU that includes waiting for slower ranks.

Caveat: on CUDA with NCCL, host time after the last gradient is kernel launch time, not device
time, so comm_wait there is small and the real wait shows up at the next synchronization (CUDA
events would measure it: not done here). Not measured: DDP's wait when the DDP model is not the
outermost module called.
"""

import time
import weakref


class GradientWatch:
    """The DDP models whose gradients are watched, and when the last watched gradient was
    ready. Autograd runs gradient hooks on its own thread for the device (not the job's thread on
    GPUs): hence one time per process, not per thread."""

    def __init__(self, ddp_class):
        self.ddp_class = ddp_class
        self.ready_ns = 0  #: time.monotonic_ns() of the last watched gradient; 0: none yet
        self._watched = weakref.WeakSet()

        def on_grad_ready(grad):
            """Returns None: the gradient is unchanged."""
            self.ready_ns = time.monotonic_ns()

        # torch.utils.hooks.unserializable_hook: pickling a parameter that has it does not warn.
        on_grad_ready.__torch_unserializable__ = True
        self.on_grad_ready = on_grad_ready

    @property
    def active(self):
        """True once a DDP model is watched: backward_pass may need splitting."""
        return bool(self._watched)

    def is_ddp(self, module):
        return isinstance(module, self.ddp_class)

    def watch(self, ddp):
        """Hooks the gradients of `ddp`'s parameters, once per DDP object. Returns the handles'
        remove functions (for uninstall). On an error nothing stays hooked and it raises."""
        if ddp in self._watched:
            return []
        self._watched.add(ddp)
        handles = []
        try:
            for param in ddp.module.parameters():
                if param.requires_grad:
                    handles.append(param.register_hook(self.on_grad_ready))
        except Exception:
            for handle in handles:
                handle.remove()
            raise
        return [handle.remove for handle in handles]
