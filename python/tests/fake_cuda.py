"""torch.cuda as a CUDA job sees it, on a machine without CUDA: events whose pairs always
report `gpu_ms` apart, and a torch that says it was built with CUDA and has initialised it.
For the GPU-timing benchmark (python/bench_hooks.py --fake-cuda) and the end-to-end test that
runs it through `stallscope run` (tests/e2e/run_e2e_test.cc). Reinstall the hooks afterwards:
they decide at install() whether torch has CUDA."""


def install(torch, gpu_ms):
    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def query(self):
            return True

        def elapsed_time(self, end):
            return gpu_ms

    torch.version.cuda = "12.1"
    torch.cuda.is_initialized = lambda: True
    torch.cuda.Event = Event
