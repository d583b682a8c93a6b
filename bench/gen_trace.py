#!/usr/bin/env python3
"""Synthetic multi-rank PyTorch-profiler (Kineto) traces for benchmarking `stallscope trace`.

Writes DIR/rank-{r}.json (or .json.gz), one file per rank, shaped like real Kineto output (see
../shared/traces/hta, e.g. nccl_parser_config = 2024 Kineto): schemaVersion, deviceProperties,
distributedInfo, then traceEvents pretty-printed one event per block with 2-space indent, CPU ops
first (per step: ProfilerStep#N, enumerate(DataLoader), DDP forward on the main thread, backward on
the autograd thread, optimizer), then GPU activities each followed by its launching runtime call
and the ac2g flow pair (kernel "f" + runtime "s"; runtime calls without a GPU activity get a
dangling "f", as in real traces), then "M" metadata events, trailing spans and
traceName / displayTimeUnit / baseTimeNanoseconds. Timestamps are float microseconds with ns
precision (2024 style) or integer microseconds with --int-us (2022 style).

The modelled job: a GPT-style transformer trained with DDP (bf16), kernels on stream 7, NCCL
all-reduce buckets on a separate comm stream, one straggler rank whose data loader is slow (the
other ranks absorb the delay in their first all-reduce), an occasional data-loader stall shared by
all ranks, and a cudaStreamSynchronize (loss.item()) at the end of each step.

Standard library only. Deterministic for a given --seed (independent of --jobs).

Examples:
  gen_trace.py --ranks 8 --size-mb 256 --out /tmp/t8          # ~256 MB raw JSON per rank
  gen_trace.py --ranks 8 --size-mb 256 --out /tmp/t8gz --gzip
  gen_trace.py --ranks 2 --steps 1 --layers 0 --out /tmp/tiny # ~28 KB per rank (tests)
  gen_trace.py --ranks 2 --events 2000 --out /tmp/small       # ~2,000 events per rank
"""

import argparse
import gzip
import os
import random
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor

# --- job shape -----------------------------------------------------------------------------------
TOKENS = 8192  # batch 4 x seq 2048
HIDDEN = 2048
FFN = 8192
BF16 = '"c10::BFloat16"'
DATALOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
STEP0 = 100  # first ProfilerStep number (after warm-up)
BASE_US = 4458676388068  # boot-clock-like base, as in 2024 Kineto traces
BASE_TIME_NS = 1711964646000000000
PID0 = 2910249
COMPUTE_STREAM = 7
COMM_STREAM = 20
CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41,
        "cudaMemsetAsync": 51, "cudaStreamSynchronize": 131, "cudaEventRecord": 135,
        "cudaStreamWaitEvent": 147}

# --- event templates (byte layout copied from 2024 Kineto output) --------------------------------
CPU_FMT = ('  {\n    "ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d,\n'
           '    "ts": %s, "dur": %s,\n    "args": {\n'
           '      "External id": %d,"Record function id": %d, "Ev Idx": %d%s\n    }\n  },\n')
KERNEL_FMT = ('  {\n    "ph": "X", "cat": "kernel", "name": "%s", "pid": %d, "tid": %d,\n'
              '    "ts": %s, "dur": %s,\n    "args": {\n'
              '      "External id": %d,      "queued": 0, "device": %d, "context": 1,'
              '      "stream": %d, "correlation": %d,      %s\n    }\n  },\n')
MEM_FMT = ('  {\n    "ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d,\n'
           '    "ts": %s, "dur": %s,\n    "args": {\n'
           '      "External id": %d,      "device": %d, "context": 1,      "stream": %d,'
           ' "correlation": %d,      "bytes": %d, "memory bandwidth (GB/s)": %r\n    }\n  },\n')
RUNTIME_FMT = ('  {\n    "ph": "X", "cat": "cuda_runtime", "name": "%s", "pid": %d, "tid": %d,\n'
               '    "ts": %s, "dur": %s,\n    "args": {\n'
               '      "External id": %d,      "cbid": %d, "correlation": %d\n    }\n  },\n')
FLOW_S_FMT = ('  {\n    "ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s,\n'
              '    "cat": "ac2g", "name": "ac2g"\n  },\n')
FLOW_F_FMT = ('  {\n    "ph": "f", "id": %d, "pid": %d, "tid": %d, "ts": %s,\n'
              '    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  },\n')
META_FMT = ('  {\n    "name": "%s", "ph": "M", "ts": %s, "pid": %s, "tid": %d,\n'
            '    "args": {\n      "%s": %s\n    }\n  },\n')


class Kernel:
    """A GPU kernel: name, nominal duration and the launch-config args (preformatted)."""

    def __init__(self, name, dur_us, regs, smem, grid, block, occ):
        self.name = name
        self.dur_ns = int(dur_us * 1000)
        threads = block[0] * block[1] * block[2]
        blocks = grid[0] * grid[1] * grid[2]
        bps = blocks / 132.0
        self.tail = ('"registers per thread": %d,      "shared memory": %d,      "blocks per SM":'
                     ' %.6f,      "warps per SM": %.6f,      "grid": [%d, %d, %d],      "block":'
                     ' [%d, %d, %d],      "est. achieved occupancy %%": %d' % (
                         regs, smem, bps, bps * threads / 32.0, grid[0], grid[1], grid[2],
                         block[0], block[1], block[2], occ))

    def issue(self, w, t, tid, ext):
        return w.launch(self, t, tid, ext)


class Mem:
    """A cudaMemcpyAsync / cudaMemsetAsync and the gpu_memcpy / gpu_memset it causes."""

    def __init__(self, api, cat, name, nbytes, gbps):
        self.api, self.cat, self.name, self.nbytes, self.gbps = api, cat, name, nbytes, gbps

    def issue(self, w, t, tid, ext):
        return w.memop(t, tid, ext, self)


class Sync:
    """A blocking runtime call (cudaStreamSynchronize): returns once stream 7 has drained."""

    def __init__(self, api):
        self.api = api

    def issue(self, w, t, tid, ext):
        return w.sync_call(self.api, t, tid, ext, w.compute_free + 2500)


class Op:
    """A CPU op (a node of the per-step op tree): children run in order, then its kernels."""

    def __init__(self, name, cpu_us, dims=None, kids=(), kernels=(), cat="cpu_op", grad=False,
                 types=None):
        self.name = name
        self.pre_ns = int(cpu_us * 600)  # 60% of self time before children, 40% after
        self.post_ns = int(cpu_us * 400)
        if dims:
            types = types or ", ".join(
                [BF16 if d != "[]" else '"Scalar"' for d in _split_dims(dims)])
            self.shape_args = ', "Input Dims": %s, "Input type": [%s]' % (dims, types)
        else:
            self.shape_args = ""
        self.kids = tuple(kids)
        self.kernels = tuple(kernels)
        self.cat = cat
        self.grad = grad  # forward op recorded by autograd: gets a Sequence number
        # Backward wrappers pass their Sequence number on to the backward node they run.
        self.passes_seq = name.startswith("autograd::engine::evaluate_function")


def _split_dims(dims):
    out, depth, cur = [], 0, ""
    for ch in dims[1:-1]:
        if ch == "[":
            depth += 1
        if depth > 0:
            cur += ch
        if ch == "]":
            depth -= 1
            if depth == 0:
                out.append(cur)
                cur = ""
    return out


# --- kernel catalogue (names as CUPTI reports them; varied per layer) ----------------------------
def gemm(layer, which, flops):
    tr = ("tn", "nt", "nn")[(layer + which) % 3]
    m, n = ((128, 128), (256, 128), (128, 256), (64, 128))[(layer * 7 + which) % 4]
    dur = flops / 550e6  # ~550 TFLOP/s effective, in us
    if (layer + which) % 5 == 4:
        name = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_%dx%d_64x3_%s_"
                "align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_%dx%d_64x3_%s_align8::"
                "Params)"
                % (m, n, tr, m, n, tr))
    else:
        name = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_%s_n_tilesize%dx%dx64_warpgroupsize%dx1x1_"
                "execute_segment_k_off_kernel__5x_cublas" % (tr, m, n, 2 if m == 256 else 1))
    return Kernel(name, dur, 168, 213 * 1024, (132, 1, 1), (384, 1, 1), 18)


def elementwise(functor, arity, dur_us):
    arr = "at::detail::Array<char*, %d>" % arity
    name = "void at::native::vectorized_elementwise_kernel<4, %s, %s >(int, %s, %s)" % (
        functor, arr, functor, arr)
    return Kernel(name, dur_us, 26, 0, (TOKENS * HIDDEN // 512, 1, 1), (128, 1, 1), 92)


ADD = elementwise("at::native::CUDAFunctor_add<c10::BFloat16>", 3, 28)
MUL = elementwise("at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
                  "at::native::binary_internal::MulFunctor<float> >", 3, 27)
GELU = elementwise("at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
                   "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
                   "{lambda(c10::BFloat16)#1}", 2, 55)
GELU_BWD = elementwise("at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
                       "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
                       "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}", 3, 80)
FILL = elementwise("at::native::FillFunctor<c10::BFloat16>", 1, 6)
LN_FWD = Kernel("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::"
                "BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, "
                "c10::BFloat16 const*, float*, float*, c10::BFloat16*)", 24, 30, 0,
                (TOKENS, 1, 1), (256, 1, 1), 85)
LN_BWD_IN = Kernel("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
                   "<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*"
                   ", float const*, c10::BFloat16 const*, c10::BFloat16*, int)", 38, 40, 0,
                   (TOKENS, 1, 1), (256, 1, 1), 80)
LN_BWD_W = Kernel("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<c10::"
                  "BFloat16, float>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float "
                  "const*, float const*, c10::BFloat16*, c10::BFloat16*)", 21, 64, 8448,
                  (64, 1, 1), (32, 32, 1), 50)
_FA_TR = ("pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::"
          "bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >")
_FB_TR = ("pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::"
          "bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >")
FLASH_FWD = Kernel("void pytorch_flash::flash_fwd_kernel<%s, false, true, false, false, true, true,"
                   " false, false>(pytorch_flash::Flash_fwd_params)" % _FA_TR, 310, 255, 49152,
                   (16, 64, 4), (128, 1, 1), 12)
FLASH_BWD_DOT = Kernel("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, %s>(pytorch_flash::"
                       "Flash_bwd_params)" % _FB_TR, 18, 32, 0, (16, 64, 4), (256, 1, 1), 70)
FLASH_BWD = Kernel("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<%s, true, "
                   "false, false, false, false, true, false, false>(pytorch_flash::"
                   "Flash_bwd_params)" % _FB_TR, 760, 255, 147456, (16, 64, 4), (256, 1, 1), 12)
FLASH_BWD_CVT = Kernel("void pytorch_flash::flash_bwd_convert_dq_kernel<%s>(pytorch_flash::"
                       "Flash_bwd_params, int)" % _FB_TR, 15, 40, 0, (16, 64, 4), (256, 1, 1), 66)
DROPOUT = Kernel("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, "
                 "float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 "
                 "const, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned "
                 "int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::"
                 "PhiloxCudaState)", 36, 32, 0, (1056, 1, 1), (256, 1, 1), 90)
REDUCE_SUM = Kernel("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
                    "at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::"
                    "BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda("
                    "float, float)#1}>, unsigned int, c10::BFloat16, 4> >(at::native::ReduceOp<c10"
                    "::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<"
                    "c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda"
                    "(float, float)#1}>, unsigned int, c10::BFloat16, 4>)", 17, 32, 16,
                    (16, 64, 1), (32, 16, 1), 44)
SOFTMAX = Kernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
                 "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, "
                 "float const*, int)", 420, 36, 0, (TOKENS, 1, 1), (1024, 1, 1), 97)
NLL = Kernel("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float,"
             " long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
             "long, long)", 31, 24, 0, (1, 1, 1), (32, 1, 1), 0)
SOFTMAX_BWD = Kernel("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float,"
                     " float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>("
                     "float*, float const*, float const*, long)", 610, 40, 0, (TOKENS, 1, 1),
                     (1024, 1, 1), 95)
_MTA = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<%d>, at::native::(anonymous namespace)::%s<float, %d, %d, "
        "%d>%s>(at::native::(anonymous namespace)::TensorListMetadata<%d>, at::native::(anonymous "
        "namespace)::%s<float, %d, %d, %d>%s)")


def mta(depth, functor, r_args, extra, dur_us):
    name = _MTA % (depth, functor, depth, r_args, 0, extra, depth, functor, depth, r_args, 0, extra)
    return Kernel(name, dur_us, 32, 0, (320, 1, 1), (512, 1, 1), 90)


FOREACH = (
    ("aten::_foreach_mul_", mta(1, "BinaryOpScalarFunctor", 1, ", std::multiplies<float>, float",
                               180)),
    ("aten::_foreach_add_", mta(2, "BinaryOpListAlphaFunctor", 2, ", std::plus<float>, float",
                                260)),
    ("aten::_foreach_lerp_", mta(2, "TernaryOpScalarFunctor", 2,
                                 ", at::native::LerpFunctor<float>, float", 270)),
    ("aten::_foreach_addcmul_", mta(3, "PointwiseOpScalarFunctor", 3,
                                    ", std::multiplies<float>, float", 330)),
    ("aten::_foreach_sqrt", mta(2, "UnaryOpFunctor", 2, ", at::native::Sqrt<float>", 250)),
    ("aten::_foreach_div_", mta(2, "BinaryOpScalarListFunctor", 2, ", std::divides<float>", 240)),
    ("aten::_foreach_addcdiv_", mta(4, "PointwiseOpScalarListFunctor", 4,
                                    ", std::divides<float>, float", 390)),
)
NCCL_ALGOS = ("RING_LL", "RING_LL128", "RING_SIMPLE", "TREE_LL128")


def dims(*shapes):
    return "[" + ", ".join("[" + ", ".join(str(x) for x in s) + "]" for s in shapes) + "]"


def linear_fwd(layer, which, n_out, n_in):
    w = dims([TOKENS, n_in], [n_out, n_in], [n_out])
    mm = gemm(layer, which, 2.0 * TOKENS * n_in * n_out)
    return Op("aten::linear", 9, w, grad=True, kids=(
        Op("aten::t", 4, dims([n_out, n_in]), kids=(
            Op("aten::transpose", 3, dims([n_out, n_in], [], []), kids=(
                Op("aten::as_strided", 2, dims([n_out, n_in], [], [], [])),)),)),
        Op("aten::addmm", 12, dims([n_out], [TOKENS, n_in], [n_in, n_out], [], []),
           kernels=(mm,))))


def linear_bwd(layer, which, n_out, n_in):
    """Backward of a linear layer: (AddmmBackward0 node, AccumulateGrad of its weight)."""
    fl = 2.0 * TOKENS * n_in * n_out
    addmm = Op("AddmmBackward0", 5, kids=(
        Op("aten::t", 3, dims([n_in, n_out])),
        Op("aten::mm", 10, dims([TOKENS, n_out], [n_out, n_in]),
           kernels=(gemm(layer, which + 1, fl),)),
        Op("aten::mm", 10, dims([n_out, TOKENS], [TOKENS, n_in]),
           kernels=(gemm(layer, which + 2, fl),)),
        Op("aten::sum", 9, dims([TOKENS, n_out], [], [], []), kernels=(REDUCE_SUM,))))
    accumulate = Op("torch::autograd::AccumulateGrad", 4, kids=(
        Op("aten::add_", 8, dims([n_out, n_in], [n_out, n_in], []), kernels=(ADD,)),))
    return (Op("autograd::engine::evaluate_function: AddmmBackward0", 6, kids=(addmm,)),
            Op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 4,
               kids=(accumulate,)))


def build_layer(layer):
    """Forward and backward op trees for one transformer block."""
    act = dims([TOKENS, HIDDEN])
    ln = Op("aten::layer_norm", 6, dims([TOKENS, HIDDEN], [], [HIDDEN], [HIDDEN], [], []),
            grad=True, kids=(Op("aten::native_layer_norm", 10, kernels=(LN_FWD,)),))
    attn = Op("aten::scaled_dot_product_attention", 7, grad=True, kids=(
        Op("aten::_scaled_dot_product_flash_attention", 6, kids=(
            Op("aten::_flash_attention_forward", 14, kernels=(FLASH_FWD,)),)),))
    drop = Op("aten::dropout", 5, grad=True, kids=(
        Op("aten::native_dropout", 11, act, kernels=(DROPOUT,)),))
    add = Op("aten::add", 9, dims([TOKENS, HIDDEN], [TOKENS, HIDDEN], []), grad=True,
             kernels=(ADD,))
    fwd = (ln, linear_fwd(layer, 0, 3 * HIDDEN, HIDDEN), attn, linear_fwd(layer, 3, HIDDEN, HIDDEN),
           drop, add, ln, linear_fwd(layer, 6, FFN, HIDDEN),
           Op("aten::gelu", 9, act, grad=True, kernels=(GELU,)),
           linear_fwd(layer, 9, HIDDEN, FFN), drop, add)

    def ev(name, kernels):
        return Op("autograd::engine::evaluate_function: " + name, 6, kids=(
            Op(name, 8, kernels=kernels),))

    ln_b = (ev("NativeLayerNormBackward0", (LN_BWD_IN, LN_BWD_W)),)
    bwd = ((ev("AddBackward0", ()), ev("NativeDropoutBackward0", (MUL,))) +
           linear_bwd(layer, 10, HIDDEN, FFN) + (ev("GeluBackward0", (GELU_BWD,)),) +
           linear_bwd(layer, 7, FFN, HIDDEN) + ln_b +
           (ev("AddBackward0", ()), ev("NativeDropoutBackward0", (MUL,))) +
           linear_bwd(layer, 4, HIDDEN, HIDDEN) +
           (ev("ScaledDotProductFlashAttentionBackward0",
               (FLASH_BWD_DOT, FLASH_BWD, FLASH_BWD_CVT)),) +
           linear_bwd(layer, 1, 3 * HIDDEN, HIDDEN) + ln_b)
    return fwd, bwd


LAYER_PARAMS = 12 * HIDDEN * HIDDEN + 13 * HIDDEN


class RankWriter:
    """Generates one rank's trace step by step: CPU events to `cpu_out`, GPU part to `gpu_out`."""

    def __init__(self, opts, rank):
        self.opts = opts
        self.rank = rank
        self.device = rank % 8
        self.pid = PID0 + 7919 * rank
        self.main_tid = self.pid
        self.bwd_tid = self.pid + 9503
        # Counters as in real traces: External ids also advance for runtime calls outside ops,
        # Record function ids lag behind them, Ev Idx is the 0-based CPU event index.
        self.ext = 140 + 17 * rank  # External id
        self.rfid = 0  # Record function id
        self.ev_idx = -1
        self.corr = 0  # CUPTI correlation id
        self.seq = 0  # autograd Sequence number
        self.cpu = []
        self.gpu = []
        self.events = 0
        self.compute_free = 0  # ns, when stream 7 is idle
        self.comm_free = 0
        self.fts = fmt_int_us if opts.int_us else fmt_ns_us
        self.rng = random.Random()
        self.layers = [build_layer(i) for i in range(opts.layers)]

    # --- primitives ------------------------------------------------------------------------------
    def reserve_cpu_slot(self):
        """A cpu_op slot filled in when the op ends (parents are written after their children's
        ids are taken), with fresh External id, Record function id and Ev Idx."""
        idx = len(self.cpu)
        self.cpu.append(None)
        self.ext += 1
        self.rfid += 1
        self.ev_idx += 1
        return idx, self.ext, self.rfid, self.ev_idx

    def run_op(self, op, t, tid, seq=None):
        """Runs `op` (children, then its kernels) starting at host time t; returns the end time."""
        idx, ext, rfid, ev = self.reserve_cpu_slot()
        start = t
        rnd = self.rng.random
        t += int(op.pre_ns * (0.7 + 0.6 * rnd()))
        if op.grad and seq is None:
            self.seq += 1
            seq = self.seq
        kid_seq = seq if op.passes_seq else None
        for kid in op.kids:
            t = self.run_op(kid, t, tid, kid_seq)
            kid_seq = None
        for k in op.kernels:
            t = k.issue(self, t, tid, ext)
        t += int(op.post_ns * (0.7 + 0.6 * rnd()))
        tail = op.shape_args
        if seq is not None:
            tail += ', "Fwd thread id": %d, "Sequence number": %d' % (
                1 if tid == self.bwd_tid else 0, seq)
        fts = self.fts
        self.cpu[idx] = CPU_FMT % (op.cat, op.name, self.pid, tid, fts(start), fts(t - start),
                                   ext, rfid, ev, tail)
        self.events += 1
        return t

    def annotation(self, name, t, tid):
        """Opens a user_annotation; returns a handle for end_annotation."""
        idx = len(self.cpu)
        self.cpu.append(None)
        self.ext += 1
        self.rfid += 1
        self.ev_idx += 1
        self.events += 1
        return (idx, name, t, tid, self.ext, self.rfid, self.ev_idx)

    def end_annotation(self, h, t):
        idx, name, start, tid, ext, rfid, ev = h
        self.cpu[idx] = CPU_FMT % ("user_annotation", name, self.pid, tid, self.fts(start),
                                   self.fts(t - start), ext, rfid, ev, "")

    def runtime(self, name, t, dur, tid, ext, flow):
        """A cuda_runtime event and its flow start; returns its correlation id."""
        self.corr += 1
        c = self.corr
        fts = self.fts
        ts = fts(t)
        self.gpu.append(RUNTIME_FMT % (name, self.pid, tid, ts, fts(dur), ext, CBID[name], c))
        # Real Kineto also writes a dangling "f" after runtime calls without a GPU activity.
        self.gpu.append((FLOW_S_FMT if flow else FLOW_F_FMT) % (c, self.pid, tid, ts))
        self.events += 2
        return c

    def gpu_activity(self, c, start, dur, stream, ext, kernel=None, mem=None):
        """Writes a kernel (or memcpy/memset when mem=(cat, name, bytes)) before its launch."""
        fts = self.fts
        ts = fts(start)
        if kernel is not None:
            ev = KERNEL_FMT % (kernel.name, self.device, stream, ts, fts(dur), ext, self.device,
                               stream, c, kernel.tail)
        else:
            cat, name, nbytes = mem
            ev = MEM_FMT % (cat, name, self.device, stream, ts, fts(dur), ext, self.device,
                            stream, c, nbytes, nbytes / max(dur, 1))
        # Insert before the runtime call + flow that were just appended (Kineto order).
        self.gpu.insert(len(self.gpu) - 2, FLOW_F_FMT % (c, self.device, stream, ts))
        self.gpu.insert(len(self.gpu) - 3, ev)
        self.events += 2

    def launch(self, k, t, tid, ext):
        rnd = self.rng.random
        rdur = 3500 + int(3000 * rnd())
        c = self.runtime("cudaLaunchKernel", t, rdur, tid, ext, True)
        start = max(t + rdur // 2, self.compute_free + 1100 + int(800 * rnd()))
        dur = int(k.dur_ns * (0.97 + 0.06 * rnd()))
        self.compute_free = start + dur
        self.gpu_activity(c, start, dur, COMPUTE_STREAM, ext, kernel=k)
        return t + rdur

    def memop(self, t, tid, ext, m):
        api, cat, name, nbytes, gbps = m.api, m.cat, m.name, m.nbytes, m.gbps
        rdur = 6000 + int(8000 * self.rng.random())
        c = self.runtime(api, t, rdur, tid, ext, True)
        start = max(t + rdur // 2, self.compute_free + 1500)
        dur = 1500 + int(nbytes / gbps)
        self.compute_free = start + dur
        self.gpu_activity(c, start, dur, COMPUTE_STREAM, ext, mem=(cat, name, nbytes))
        return t + rdur

    def sync_call(self, api, t, tid, ext, until):
        dur = max(2000, until - t)
        self.runtime(api, t, dur, tid, ext, False)
        return t + dur

    # --- one training step -----------------------------------------------------------------------
    def allreduce(self, t, tid, bucket, wait_ns):
        """DDP bucket: record_param_comms > nccl:all_reduce > event/wait + NCCL kernel launch."""
        kernel, nelems, comm_args = bucket
        idx, ext, rfid, ev = self.reserve_cpu_slot()
        start = t
        t += 9000
        h = self.annotation("nccl:all_reduce", t, tid)
        t += 6000
        t = self.sync_call("cudaEventRecord", t, tid, ext, 0)
        ready = self.compute_free  # the comm stream waits for the bucket's last gradient kernel
        t = self.sync_call("cudaStreamWaitEvent", t, tid, ext, 0)
        rnd = self.rng.random
        rdur = 9000 + int(6000 * rnd())
        self.corr += 1
        c = self.corr
        fts = self.fts
        self.gpu.append(RUNTIME_FMT % ("cudaLaunchKernelExC", self.pid, tid, fts(t), fts(rdur), ext,
                                       CBID["cudaLaunchKernelExC"], c))
        self.gpu.append(FLOW_S_FMT % (c, self.pid, tid, fts(t)))
        self.events += 2
        kstart = max(t + rdur // 2, self.comm_free + 2000, ready + 3000)
        # Ring all-reduce moves 2(n-1)/n of the buffer at ~160 GB/s bus bandwidth (NVLink).
        n = self.opts.ranks
        xfer = int(2.0 * max(n - 1, 1) / max(n, 1) * nelems * 2 / 160.0 * (0.95 + 0.1 * rnd()))
        dur = 8000 + xfer + wait_ns
        self.comm_free = kstart + dur
        self.gpu_activity(c, kstart, dur, COMM_STREAM, ext, kernel=kernel)
        t += rdur + 5000
        self.end_annotation(h, t)
        t += 4000
        self.cpu[idx] = CPU_FMT % ("cpu_op", "record_param_comms", self.pid, tid, fts(start),
                                   fts(t - start), ext, rfid, ev, comm_args)
        self.events += 1
        return t

    def step(self, n, t0):
        """Writes ProfilerStep#n starting at host time t0 (ns); returns the next step's start."""
        o = self.opts
        shared = random.Random(o.seed * 1000003 + n)  # same on every rank: job-wide events
        self.rng.seed("%d/%d/%d" % (o.seed, self.rank, n))
        main, bwd = self.main_tid, self.bwd_tid
        dl_ns = int(350000 * (0.8 + 0.4 * self.rng.random()))
        if shared.random() < 0.08:
            dl_ns += int(12e6 + 12e6 * shared.random())  # data-loader stall on all ranks
        straggle_ns = int(o.straggler_ms * 1e6 * (0.8 + 0.4 * shared.random()))
        if o.straggler < 0 or o.straggler >= o.ranks:
            straggle_ns = 0
        elif self.rank == o.straggler:
            dl_ns += straggle_ns
        step_h = self.annotation("ProfilerStep#%d" % n, t0, main)
        t = t0 + 14000
        h = self.annotation(DATALOADER, t, main)
        t += dl_ns
        self.end_annotation(h, t)
        t += 22000
        for _ in range(2 if self.layers else 1):  # input ids and labels
            t = self.run_op(COPY_IN, t, main)
        h = self.annotation("Optimizer.zero_grad#AdamW.zero_grad", t, main)
        t = self.run_op(ZERO, t + 8000, main) + 6000
        self.end_annotation(h, t)
        h = self.annotation("DistributedDataParallel.forward", t, main)
        t += 30000
        for fwd, _ in self.layers:
            for op in fwd:
                t = self.run_op(op, t, main)
        t = self.run_op(LOSS, t, main) + 12000
        self.end_annotation(h, t)
        # Backward runs on the autograd thread; DDP all-reduces a bucket every few layers.
        tb = t + 25000
        seq = self.seq
        t = self.run_op(LOSS_BWD, tb, bwd, seq)
        wait = 0 if self.rank == o.straggler else straggle_ns  # first bucket absorbs the straggler
        nl = len(self.layers)
        if nl == 0:  # tiny traces (--layers 0) still get one all-reduce
            t = self.allreduce(t, bwd, self.buckets[1], wait)
        for i in range(nl - 1, -1, -1):
            for op in self.layers[i][1]:
                seq -= 1
                t = self.run_op(op, t, bwd, seq)
            if i % o.bucket_layers == 0:
                t = self.allreduce(t, bwd, self.buckets[min(nl - i, o.bucket_layers)], wait)
                wait = 0
        t += 30000
        h = self.annotation("Optimizer.step#AdamW.step", t, main)
        self.ext += 1
        t = self.sync_call("cudaStreamWaitEvent", t + 9000, main, self.ext, 0)
        self.compute_free = max(self.compute_free, self.comm_free)
        for op in self.foreach:
            t = self.run_op(op, t, main)
        t += 15000
        self.end_annotation(h, t)
        t = self.run_op(ITEM, t, main)
        self.end_annotation(step_h, t + 9000)
        return t + 40000


# Step-level op trees (shared by all layers' configurations).
COPY_IN = Op("aten::to", 3, dims([4, 2048], [], [], [], [], []),
             types='"long int", "ScalarType", "", "", "Scalar", "Scalar"', kids=(
                 Op("aten::_to_copy", 5, kids=(
                     Op("aten::empty_strided", 4),
                     Op("aten::copy_", 6, kernels=(Mem("cudaMemcpyAsync", "gpu_memcpy",
                                                       "Memcpy HtoD (Pinned -> Device)", 65536,
                                                       21.0),)))),))
ZERO = Op("aten::zero_", 4, kids=(Op("aten::fill_", 7, kernels=(FILL,)),),
          kernels=(Mem("cudaMemsetAsync", "gpu_memset", "Memset (Device)", 25165824, 1300.0),))
LOSS = Op("aten::cross_entropy_loss", 8, grad=True, kids=(
    Op("aten::log_softmax", 5, kids=(Op("aten::_log_softmax", 9, kernels=(SOFTMAX,)),)),
    Op("aten::nll_loss_nd", 4, kids=(Op("aten::nll_loss_forward", 9, kernels=(NLL,)),))))
LOSS_BWD = Op("autograd::engine::evaluate_function: LogSoftmaxBackward0", 6, kids=(
    Op("LogSoftmaxBackward0", 5, kids=(
        Op("aten::_log_softmax_backward_data", 9, kernels=(SOFTMAX_BWD,)),)),))
ITEM = Op("aten::item", 3, dims([]), kids=(Op("aten::_local_scalar_dense", 6, kernels=(
    Mem("cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 4, 0.5),
    Sync("cudaStreamSynchronize"))),))


def fmt_ns_us(ns):
    """2024 Kineto: microseconds with three decimals (ns precision)."""
    return "%d.%03d" % divmod(ns, 1000)


def fmt_int_us(ns):
    """2022 Kineto: integer microseconds."""
    return "%d" % (ns // 1000)


# --- file assembly -------------------------------------------------------------------------------
def header(opts, rank):
    dev = ('    {\n      "id": %d, "name": "NVIDIA H100 80GB HBM3",'
           ' "totalGlobalMem": 85045231616,\n'
           '      "computeMajor": 9, "computeMinor": 0,\n'
           '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
           '      "regsPerBlock": 65536, "warpSize": 32,\n'
           '      "sharedMemPerBlock": 49152, "numSms": 132\n'
           '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,'
           ' "sharedMemPerMultiprocessor": 233472\n    }')
    ranks = "[" + ", ".join(str(r) for r in range(opts.ranks)) + "]"
    dist = ('{"backend": "nccl", "rank": %d, "world_size": %d, "pg_count": 1, "pg_config": '
            '[{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", '
            '"pg_size": %d, "ranks": %s}], "nccl_version": "2.19.3"}' % (
                rank, opts.ranks, opts.ranks, ranks))
    if opts.int_us:  # 2022 Kineto: no pg_config
        dist = '{"backend": "nccl", "rank": %d, "world_size": %d}' % (rank, opts.ranks)
    return ('\n{\n  "schemaVersion": 1,\n  "deviceProperties": [\n%s\n  ],\n'
            '  "distributedInfo": %s,\n  "traceEvents": [\n' % (
                ",\n".join(dev % i for i in range(8)), dist))


def trailer(w, t_start, t_end):
    """Metadata ("M") events, the profiler span and the closing keys."""
    fts = w.fts
    ts = fts(t_start)
    out = []

    def meta(name, pid, tid, key, value):
        out.append(META_FMT % (name, ts, pid, tid, key, value))

    meta("process_name", w.pid, 0, "name", '"python3.10"')
    meta("process_labels", w.pid, 0, "labels", '"CPU"')
    meta("process_sort_index", w.pid, 0, "sort_index", w.pid)
    for d in range(8):
        meta("process_name", d, 0, "name", '"python3.10"')
        meta("process_labels", d, 0, "labels", '"GPU %d"' % d)
        meta("process_sort_index", d, 0, "sort_index", 16777216 + d)
    for s in (COMPUTE_STREAM, COMM_STREAM):
        meta("thread_name", w.device, s, "name", '"stream %d "' % s)
        meta("thread_sort_index", w.device, s, "sort_index", s)
    for tid, tname in ((w.main_tid, "python3.10"), (w.bwd_tid, "pt_autograd_0")):
        meta("thread_name", w.pid, tid, "name", '"thread %d (%s)"' % (tid, tname))
        meta("thread_sort_index", w.pid, tid, "sort_index", tid)
    t0 = fts(t_start - 28000000)
    out.append('  {\n    "ph": "X", "cat": "Trace", "ts": %s, "dur": %s,\n'
               '    "pid": "Spans", "tid": "PyTorch Profiler",\n'
               '    "name": "PyTorch Profiler (0)",\n    "args": {\n      "Op count": 0\n    }\n'
               '  },\n' % (t0, fts(t_end - t_start + 28000000)))
    out.append('  {\n    "name": "process_sort_index", "ph": "M", "ts": %s,\n'
               '    "pid": "Spans", "tid": 0,\n    "args": {\n      "sort_index": 536870912\n'
               '    }\n  },\n' % t0)
    out.append('  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
               '    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": %s\n  },\n' % t0)
    out.append('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
               '    "pid": "", "tid": "", "ts": %s\n  }\n  ]' % fts(t_end + 1000000))
    w.events += len(out)
    if w.opts.int_us:
        out.append("\n}\n")
    else:
        out.append(',\n  "traceName": "/tmp/rank-%d.json",\n  "displayTimeUnit": "ms",\n'
                   '  "baseTimeNanoseconds": %d\n}\n' % (w.rank, BASE_TIME_NS))
    return "".join(out)


def prepare(w):
    o = w.opts
    w.seq = 20000 + 17 * w.rank
    group = '"[%s]"' % ", ".join(str(r) for r in range(o.ranks))
    w.buckets = {}
    for nl in range(1, o.bucket_layers + 1):
        nelems = nl * LAYER_PARAMS
        algo = NCCL_ALGOS[min(nl, len(NCCL_ALGOS)) - 1]
        comm = (', "Collective name": "allreduce", "In msg nelems": %d, "Out msg nelems": %d, '
                '"Group size": %d, "dtype": "BFloat16", "In split size": "[]", "Out split size":'
                ' "[]", "Process Group Name": "0", "Process Group Description": "default_pg", '
                '"Process Group Ranks": %s' % (nelems, nelems, o.ranks, group))
        k = Kernel("ncclKernel_AllReduce_%s_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)"
                   % algo, 0, 96, 87568, (24, 1, 1), (640, 1, 1), 0)
        k.tail += comm
        cpu_args = (', "Process Group Name": "0", "Global rank stride": 1, "Out msg nelems": %d, '
                    '"Process Group Ranks": %s, "Group size": %d, "Global rank start": 0, '
                    '"In msg nelems": %d, "In split size": "[]", "Out split size": "[]", "dtype": '
                    '"BFloat16", "Process Group Description": "default_pg", "Collective name": '
                    '"allreduce"' % (nelems, group, o.ranks, nelems))
        w.buckets[nl] = (k, nelems, cpu_args)
    chunks = 1 + o.layers // 8
    w.foreach = [Op(name, 14, kernels=(k,) * chunks) for name, k in FOREACH[:2 + o.layers * 5]]


def write_rank(opts, rank):
    """Writes DIR/rank-{rank}.json[.gz]; returns (path, raw_bytes, events, steps, seconds)."""
    began = time.time()
    path = os.path.join(opts.out, "rank-%d.json%s" % (rank, ".gz" if opts.gzip else ""))
    tmp = path + ".part"
    spill_path = path + ".gpu.part"
    w = RankWriter(opts, rank)
    prepare(w)
    if opts.gzip:
        # Name and mtime fixed in the gzip header: byte-identical output for a seed.
        raw_file = open(tmp, "wb", buffering=1 << 22)
        out = gzip.GzipFile(os.path.basename(path)[:-3], "wb", opts.gzip_level, raw_file, mtime=0)
    else:
        raw_file = None
        out = open(tmp, "wb", buffering=1 << 22)
    spill = open(spill_path, "w+b", buffering=1 << 22)
    head = header(opts, rank).encode()
    out.write(head)
    raw = len(head)
    target = opts.size_mb * 1e6 - 8000  # leave room for the trailer
    # Clock offsets: a few us between GPUs of a node, ~0.85 ms between nodes (8 GPUs each).
    t_start = (BASE_US + 28000) * 1000 + (rank // 8) * 850000 + (rank % 8) * 3000
    t = t_start
    steps = 0
    while True:
        t = w.step(STEP0 + steps, t)
        steps += 1
        cpu = "".join(w.cpu).encode()
        gpu = "".join(w.gpu).encode()
        w.cpu.clear()
        w.gpu.clear()
        out.write(cpu)
        spill.write(gpu)
        step_bytes = len(cpu) + len(gpu)
        raw += step_bytes
        if opts.steps:
            if steps >= opts.steps:
                break
        elif opts.events:
            if w.events >= opts.events:
                break
        elif raw + step_bytes // 2 >= target:  # the nearest step boundary
            break
    spill.flush()
    spill.seek(0)
    shutil.copyfileobj(spill, out, 1 << 22)
    spill.close()
    os.remove(spill_path)
    tail = trailer(w, t_start, t).encode()
    out.write(tail)
    out.close()
    if raw_file is not None:
        raw_file.close()
    os.replace(tmp, path)
    return path, raw + len(tail), w.events, steps, time.time() - began


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Write synthetic Kineto (PyTorch profiler) traces, one file per rank.",
        epilog="Sizes are raw JSON bytes per rank (1 MB = 1e6 bytes), reached at step granularity."
        " Precedence: --steps, then --events, then --size-mb.")
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--ranks", type=int, default=8, help="number of ranks/files (default 8)")
    p.add_argument("--size-mb", type=float, default=100.0,
                   help="target raw JSON size per rank in MB (default 100)")
    p.add_argument("--events", type=int, default=0,
                   help="target events per rank instead of a size (small files for tests; "
                   "picks fewer layers unless --layers is given)")
    p.add_argument("--steps", type=int, default=0, help="exact number of ProfilerSteps per rank")
    p.add_argument("--layers", type=int, default=None,
                   help="transformer layers per step (default 24: ~6k events, ~1.8 MB per step;"
                   " 0: a minimal step, a 1-step file is ~28 KB)")
    p.add_argument("--bucket-layers", type=int, default=4, help="layers per DDP all-reduce bucket")
    p.add_argument("--straggler", type=int, default=-2,
                   help="rank with a slow data loader (default: the last rank; -1: none)")
    p.add_argument("--straggler-ms", type=float, default=3.0, help="its extra delay per step")
    p.add_argument("--gzip", action="store_true", help="write rank-{r}.json.gz")
    p.add_argument("--gzip-level", type=int, default=6, help="gzip level 1-9 (default 6)")
    p.add_argument("--int-us", action="store_true",
                   help="2022-style integer-microsecond timestamps (default: 2024 ns precision)")
    p.add_argument("--seed", type=int, default=1, help="RNG seed (output is deterministic)")
    p.add_argument("--jobs", type=int, default=0,
                   help="parallel worker processes (default: min(ranks, CPUs))")
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args(argv)
    if (o.ranks < 1 or o.size_mb < 0 or o.events < 0 or o.steps < 0 or o.bucket_layers < 1 or
            (o.layers or 0) < 0):
        p.error("--ranks, --bucket-layers must be >= 1; sizes and counts >= 0")
    if o.layers is None:
        o.layers = 24
        if o.events and not o.steps:
            o.layers = min(24, o.events // (3 * 330))
    if o.straggler == -2:
        o.straggler = o.ranks - 1 if o.ranks > 1 else -1
    if not o.steps and not o.events and o.size_mb == 0:
        o.steps = 1
    return o


def main(argv):
    o = parse_args(argv)
    os.makedirs(o.out, exist_ok=True)
    jobs = o.jobs or min(o.ranks, os.cpu_count() or 1)
    began = time.time()
    if jobs == 1:
        results = [write_rank(o, r) for r in range(o.ranks)]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(write_rank, [o] * o.ranks, range(o.ranks)))
    wall = time.time() - began
    raw = sum(r[1] for r in results)
    events = sum(r[2] for r in results)
    disk = sum(os.path.getsize(r[0]) for r in results)
    if not o.quiet:
        for path, nbytes, ev, steps, secs in results:
            print("%s: %d bytes raw, %d events, %d steps, %.1f s" % (path, nbytes, ev, steps, secs))
        print("total: %.1f MB raw JSON (%.1f MB on disk), %d events, %.0f bytes/event, %.1f s wall,"
              " %.1f MB/s raw" % (raw / 1e6, disk / 1e6, events, raw / max(events, 1), wall,
                                  raw / 1e6 / max(wall, 1e-9)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
