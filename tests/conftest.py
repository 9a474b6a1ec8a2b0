import pytest
import torch

from portattn.target import available_targets
from portattn.testing import use_target

# Every (backend, lanes) this machine executes: on NVIDIA the native 32-lane target and the wave64 emulation of the
# AMD mapping, on AMD the native target. GPU tests that use the `on_target` fixture run once per target with the
# same test body.
TARGETS = available_targets()


def target_id(target) -> str:
    if target is None:
        return "no-gpu"
    return f"{target.arch}-{target.lanes}" + (f"-emulating-{target.emulates}" if target.emulated else "")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA or ROCm GPU; skipped without one")


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


@pytest.fixture
def gen():
    """A fresh, randomly seeded generator per test (the seed is printed on failure)."""
    seed = torch.seed() % 2**31
    print(f"seed={seed}")
    return torch.Generator(device="cuda").manual_seed(seed)
