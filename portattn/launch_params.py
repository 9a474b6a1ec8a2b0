"""Host mirror of the kernels' launch-parameter struct (src_cuda/pa_params.cuh: PaFwdParams)."""
from __future__ import annotations

import ctypes


class FwdParams(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        *[(f"{t}_s{dim}", ctypes.c_int64) for t in "qkvo" for dim in "bhn"],
        ("batch", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("scale_log2", ctypes.c_float),
        ("num_m_blocks", ctypes.c_int32),
    ]
