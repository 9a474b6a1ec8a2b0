"""Peak rate of back-to-back mma.sync on the current NVIDIA GPU: TF32 m16n8k8 and float16 m16n8k16, float32
accumulation, operands in registers (no memory traffic). The ceiling for kernels built on mma.sync.

Usage (from the repository root, on a GPU machine): PYTHONPATH=. python3 scripts/mma_rate.py
"""
from __future__ import annotations

import ctypes
import statistics

import torch

from portattn.runtime import cuda_driver as cuda
from portattn.runtime import nvrtc
from portattn.runtime.sources import KernelSource

CHAINS = 8  # independent accumulators per thread, enough to keep the unit busy

_BODY = r"""
extern "C" __global__ void NAME(Args a) {
    unsigned x0 = threadIdx.x + a.iters, x1 = x0 * 3, x2 = x0 * 5, x3 = x0 * 7, y0 = x0 ^ 9, y1 = x0 ^ 11;
    float c[CHAINS][4] = {};
    for (int i = 0; i < a.iters; ++i)
#pragma unroll
        for (int j = 0; j < CHAINS; ++j)
            asm volatile("mma.sync.aligned.SHAPE.row.col.f32.TYPE.TYPE.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9},"
                         " {%0,%1,%2,%3};"
                         : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                         : "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(y0), "r"(y1));
    float s = 0.f;
    for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    a.out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""
# name -> (shape, operand type, multiply-adds per instruction)
FORMS = {"tf32": ("m16n8k8", "tf32", 16 * 8 * 8), "float16": ("m16n8k16", "f16", 16 * 8 * 16)}


class _Args(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p), ("iters", ctypes.c_int)]


def _source() -> KernelSource:
    text = "struct Args { float* out; int iters; };\n" + f"#define CHAINS {CHAINS}\n"
    for name, (shape, dtype, _) in FORMS.items():
        text += _BODY.replace("NAME", f"rate_{name}").replace("SHAPE", shape).replace("TYPE", dtype)
    return KernelSource("mma_rate.cu", text, ())


def measure(iters: int = 4096, reps: int = 10) -> dict[str, float]:
    """TFLOP/s of each form, median of ``reps`` launches of 4 blocks of 256 threads per SM."""
    props = torch.cuda.get_device_properties(0)
    arch = f"sm_{props.major}{props.minor}"
    binary, _ = nvrtc.compile_source(_source(), arch, nvrtc.options(arch, {}))
    module = cuda.load(binary, 0)
    blocks, threads = props.multi_processor_count * 4, 256
    out = torch.empty(blocks * threads, device="cuda")
    args = _Args(out.data_ptr(), iters)
    stream = torch.cuda.current_stream().cuda_stream
    rates = {}
    for name, (_, _, macs) in FORMS.items():
        fn = module.function(f"rate_{name}")
        times = []
        for rep in range(reps + 3):  # three warm-ups
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            cuda.launch(fn, (blocks, 1, 1), (threads, 1, 1), 0, args, stream)
            end.record()
            torch.cuda.synchronize()
            if rep >= 3:
                times.append(start.elapsed_time(end))
        flops = 2 * macs * CHAINS * iters * blocks * threads // 32
        rates[name] = flops / statistics.median(times) / 1e9
    return rates


if __name__ == "__main__":
    print(torch.cuda.get_device_name(0))
    for name, tflops in measure().items():
        print(f"mma.sync {name}: {tflops:.0f} TFLOP/s")
