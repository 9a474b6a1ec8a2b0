"""Short module paths: ``portattn.testing`` (the same module as ``portattn.tools.testing``) and
``portattn.flash_attn`` (``portattn.integrations.flash_attn``); importing an old path of an earlier release raises
ModuleNotFoundError naming its new place."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

ALIASES = {"portattn.testing": "portattn.tools.testing", "portattn.flash_attn": "portattn.integrations.flash_attn"}
MOVED = {
    "portattn.api": "portattn.ops.attention",
    "portattn.forward": "portattn.kernels.forward",
    "portattn.select": "portattn.kernels.forward",
    "portattn.launch_params": "portattn.kernels.forward",
    "portattn.target": "portattn.runtime.target",
    "portattn.sources": "portattn.runtime.sources",
    "portattn.compile": "portattn.runtime.compiler",
    "portattn.compile.cache": "portattn.runtime.cache",
    "portattn.compile.nvrtc": "portattn.runtime.nvrtc",
    "portattn.compile.hiprtc": "portattn.runtime.hiprtc",
    "portattn.compile.hiprtc_worker": "portattn.runtime.hiprtc_worker",
    "portattn.driver": "portattn.runtime.backend",
    "portattn.driver.cuda": "portattn.runtime.cuda_driver",
    "portattn.driver.hip": "portattn.runtime.hip_driver",
    "portattn.resources": "portattn.runtime.resources",
    "portattn.rocm_libs": "portattn.runtime.rocm_libs",
    "portattn.amdgpu_metadata": "portattn.runtime.amdgpu_metadata",
    "portattn.sdpa_patch": "portattn.integrations.sdpa",
    "portattn.cli": "portattn.tools.cli",
    "portattn.bench": "portattn.tools.bench",
    "portattn.plot": "portattn.tools.plot",
    "portattn.report": "portattn.tools.report",
    "portattn.reference": "portattn.tools.reference",
    "portattn.fragments": "portattn.tools.fragments",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _Alias(ALIASES[fullname]))
        if fullname in MOVED:
            raise ModuleNotFoundError(f"{fullname} has moved: import {MOVED[fullname]} instead", name=fullname)
        return None


def install() -> None:
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
