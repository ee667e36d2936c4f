"""Shared fixtures of the integration tests (their helpers are in realstacks.py)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from corefiles import Cores
from realstacks import IMPLEMENTATIONS, Builder, Captures


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def unwinder_class(request: pytest.FixtureRequest) -> Any:
    module, name = IMPLEMENTATIONS[request.param]
    return getattr(importlib.import_module(module), name)


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="session")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Captures:
    return Captures(tmp_path_factory.mktemp("captures"))


@pytest.fixture(scope="session")
def cores(tmp_path_factory: pytest.TempPathFactory, build: Builder) -> Cores:
    """Core files made at test time (tests/corefiles.py), once per session."""
    return Cores(tmp_path_factory.mktemp("cores"), build)
