"""Fixtures for the DES tests (fakes in sim_fakes.py)."""

import pytest

from levers.catalog import Engine
from predictor.hardware import parse_cluster
from tests.predictor.sim.sim_fakes import FakeTarget


@pytest.fixture
def h100():
    return parse_cluster("h100x8")


@pytest.fixture
def target(h100):
    return FakeTarget(h100, Engine.VLLM)
