"""The build environment (gensets.builders.environment): made once from the config and the thread count, frozen,
and what a process started elsewhere (a Ray worker) is pinned with."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from gensets import determinism
from gensets.builders.environment import BuildEnvironment


def test_the_mode_comes_from_the_config_and_a_config_without_one_builds_strict():
    assert BuildEnvironment.of(SimpleNamespace(reproducible="fast"), 3) == BuildEnvironment("fast", 3)
    assert BuildEnvironment.of(SimpleNamespace()) == BuildEnvironment("strict", 1)  # a plugin's own Config


def test_it_is_frozen_and_a_rebuild_sets_its_threads_in_a_copy():
    env = BuildEnvironment.of(SimpleNamespace(reproducible="strict"), 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.threads = 4
    assert env.with_threads(4) == BuildEnvironment("strict", 4) and env.threads == 2


def test_a_worker_elsewhere_gets_the_pins_of_strict_only():
    assert BuildEnvironment("strict").pins() == {**determinism.CPU_PINS, **determinism.GPU_PINS}
    assert BuildEnvironment("fast").pins() == {}
