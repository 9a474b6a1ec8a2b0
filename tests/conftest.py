import os
import random
from types import SimpleNamespace

import pytest
import torch

from portattn.runtime.target import Target, available_targets
from portattn.tools.testing import use_target

# Every (backend, lanes) this machine executes: on NVIDIA the native 32-lane target and the wave64 emulation of the
# AMD mapping, on AMD the native target. GPU tests that use the `on_target` fixture run once per target with the
# same test body.
TARGETS = available_targets()


def target_id(target) -> str:
    if target is None:
        return "no-gpu"
    return f"{target.arch}-{target.lanes}" + (f"-emulating-{target.emulates}" if target.emulated else "")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no GPU on this machine (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        params = TARGETS or [None]
        metafunc.parametrize("target", params, ids=[target_id(t) for t in params])


@pytest.fixture
def on_target(target):
    """Run the test's attention calls on `target`."""
    with use_target(target):
        yield target


def _test_seed() -> int:
    """A fresh seed per test, printed (and so shown on failure); PORTATTN_TEST_SEED=<seed> replays it."""
    seed = int(os.environ.get("PORTATTN_TEST_SEED") or torch.seed() % 2**31)
    print(f"seed={seed}")
    return seed


@pytest.fixture
def gen():
    """A freshly seeded CUDA generator per test."""
    return torch.Generator(device="cuda").manual_seed(_test_seed())


@pytest.fixture
def rng():
    """A freshly seeded Python random generator per test (CPU tests' random draws)."""
    return random.Random(_test_seed())


def fake_props(arch: str, **extra):
    if arch.startswith("sm_"):
        major, minor = int(arch[3]), int(arch[4])
        props = dict(major=major, minor=minor, multi_processor_count=132, warp_size=32,
                     shared_memory_per_block_optin=232448, shared_memory_per_multiprocessor=233472)
    else:
        lanes = 32 if arch.startswith("gfx11") else 64
        props = dict(major=9, minor=0, gcnArchName=f"{arch}:sramecc+:xnack-", multi_processor_count=104,
                     warp_size=lanes, shared_memory_per_block_optin=65536, shared_memory_per_multiprocessor=65536)
    props.update(extra)
    return SimpleNamespace(**props)


@pytest.fixture
def fake_device(monkeypatch):
    def install(arch: str, **extra):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: fake_props(arch, **extra))
        monkeypatch.setattr(torch.version, "hip", None if arch.startswith("sm_") else "6.2.0", raising=False)
        return Target.detect(torch.device("cuda", 0))

    monkeypatch.delenv("PORTATTN_LANES", raising=False)
    return install
