"""Test isolation: every test gets its own INFERASIM_HOME (user cards, anchors,
ledgers), no LM configured, and LiteLLM kept offline (STYLE.md rule 10)."""

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "inferasim-home"
    home.mkdir()
    monkeypatch.setenv("INFERASIM_HOME", str(home))
    monkeypatch.delenv("INFERASIM_LM", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return home
