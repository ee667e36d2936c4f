"""Shared fixtures of the integration tests (their helpers are in realstacks.py)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
from corefiles import Cores, isolate_section_cache
from hypothesis import HealthCheck, settings
from minidumps import Dumps
from perfdata import Recordings
from realstacks import IMPLEMENTATIONS, Builder, Captures

# No test fetches from the debuginfod servers of the environment (Debian's, say): the tests of
# the debuginfod client (test_debuginfod.py) name their own.
for _name in ("DEBUGINFOD_URLS", "STACKWALK_OFFLINE"):
    os.environ.pop(_name, None)
isolate_section_cache()

# Hypothesis (test_hostile_input.py): a few dozen examples per test in the normal run;
# HYPOTHESIS_PROFILE=long for a campaign. Time is bounded by the tests themselves (each file is
# read in a worker process with a time limit), not by hypothesis' per-example deadline, which a
# loaded machine would trip.
_HYPOTHESIS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", max_examples=40, **_HYPOTHESIS)
settings.register_profile("long", max_examples=3000, **_HYPOTHESIS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory, build: Builder) -> Recordings:
    """Every workload's perf.data (tests/perfdata.py), recorded once per session."""
    return Recordings(tmp_path_factory.mktemp("perf"), build)


@pytest.fixture(scope="session")
def dumps(tmp_path_factory: pytest.TempPathFactory, build: Builder) -> Dumps:
    """Minidumps made at test time (tests/minidumps.py), once per session."""
    return Dumps(tmp_path_factory.mktemp("minidumps"), build)
