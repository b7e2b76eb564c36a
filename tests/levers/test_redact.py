"""The one redaction pass (levers.redact) and what reaches a file or a terminal."""

import json

from levers.redact import MASK, clean_text, redact, redact_data
from predictor.files import atomic_write_text


def test_environment_keys_key_shapes_and_url_userinfo(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", 'sk-live"quoted\\value-123')
    text = json.dumps({"echo": 'the key is sk-live"quoted\\value-123'})
    assert 'quoted' not in redact(text) and json.loads(redact(text))["echo"] == f"the key is {MASK}"
    assert redact("Authorization: Bearer abcdefghijklmnopqrstu") == f"Authorization: Bearer {MASK}"
    assert redact('{"url": "http://u:p@h/v1", "other": "x@y"}') == '{"url": "http://***@h/v1", "other": "x@y"}'


def test_redact_data_walks_keys_and_values(monkeypatch):
    monkeypatch.setenv("INFERASIM_LM_API_KEY", "hunter2hunter2")
    data = redact_data({"hunter2hunter2": ["x hunter2hunter2", 3, None], "n": 1.5})
    assert data == {MASK: [f"x {MASK}", 3, None], "n": 1.5}


def test_clean_text_strips_escapes():
    assert clean_text("ok\x1b]52;c;ZXZpbA==\x07 \u202edone") == "ok]52;c;ZXZpbA== done"


def test_every_written_file_is_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SECRET_TOKEN", "tok-0123456789")
    path = atomic_write_text(tmp_path / "out.json", '{"note": "tok-0123456789"}')
    assert path.read_text() == '{"note": "***"}'
