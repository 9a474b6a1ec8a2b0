"""The launch-state caches of the kernel families stay bounded."""
from portattn.runtime import loader


def test_remember_keeps_at_most_the_limit_and_returns_the_value(monkeypatch):
    monkeypatch.setattr(loader, "SIGNATURES_KEPT", 3)
    cache: dict = {}
    for i in range(10):
        assert loader.remember(cache, ("shape", i), i) == i
        assert len(cache) <= 3 and cache[("shape", i)] == i
