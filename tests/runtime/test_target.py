"""Target detection from torch's device properties, named archs, the lane override (no GPU needed)."""
import pytest
import torch

from portattn import UnsupportedTargetError
from portattn.runtime.target import KNOWN_ARCHS, WAVE_SLOTS, Target, available_targets


def test_offline_and_detected_targets_agree(fake_device):
    assert fake_device("gfx90a") == Target("hip", "gfx90a", 64, 104, 65536, 65536) == Target.for_arch("gfx90a")
    assert Target.for_arch("sm_90").smem_per_block == 232448


def test_lanes_override(fake_device, monkeypatch):
    monkeypatch.setenv("PORTATTN_LANES", "32")
    assert fake_device("sm_90").lanes == 32
    monkeypatch.setenv("PORTATTN_LANES", "64")
    emulated = fake_device("sm_90")
    assert (emulated.lanes, emulated.hardware_lanes, emulated.emulates) == (64, 32, "gfx90a") and emulated.emulated
    monkeypatch.setenv("PORTATTN_LANES", "32")
    with pytest.raises(UnsupportedTargetError, match="PORTATTN_LANES to 64"):
        fake_device("gfx90a")
    monkeypatch.setenv("PORTATTN_LANES", "wide")
    with pytest.raises(UnsupportedTargetError, match="PORTATTN_LANES must be a lane count"):
        fake_device("sm_90")


def test_no_gpu_means_no_available_targets(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert available_targets() == []


def test_unknown_named_arch_is_refused_with_the_known_list():
    with pytest.raises(UnsupportedTargetError, match="known: gfx1100, gfx1201, gfx908, gfx90a, gfx942, gfx950, sm_80"):
        Target.for_arch("gfx803")


def test_every_amd_arch_has_a_family_with_occupancy_rules_and_a_rocm_release():
    for arch, info in KNOWN_ARCHS.items():
        if arch.startswith("gfx"):
            assert info.family in WAVE_SLOTS, arch
            assert info.lanes == (32 if info.family.startswith("rdna") else 64), arch
            assert tuple(int(x) for x in info.min_rocm.split(".")) >= (4, 0), arch


def test_overlapping_launches_only_on_nvidia_sm90_and_later(fake_device, monkeypatch):
    assert Target.for_arch("sm_90").overlapping_launches
    assert not Target.for_arch("sm_80").overlapping_launches and not Target.for_arch("sm_89").overlapping_launches
    assert not any(Target.for_arch(a).overlapping_launches for a in KNOWN_ARCHS if a.startswith("gfx"))
    monkeypatch.setenv("PORTATTN_LANES", "64")
    assert fake_device("sm_90").overlapping_launches  # the 64-lane mapping runs on the same NVIDIA hardware
    assert Target("cuda", "sm_100", 32, 148, 232448, 233472).overlapping_launches
