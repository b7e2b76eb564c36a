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


def test_provider_token_shapes_and_named_secrets_are_masked_and_lever_text_is_not():
    """Tokens of the providers a user of this tool holds (Hugging Face above all), any
    `bearer` header, and the value written after a secret's name are masked; lever and
    metric text that merely says `tokens` is left alone."""
    secrets = ["hf_abcdefghijklmnopqrstuvwx", "ghp_abcdefghijklmnopqrstuvwxyz1234", "github_pat_abcdefghijklmnopqrstuvw_x",
               "glpat-abcdefghijklmnopqrstu", "AKIAABCDEFGHIJKLMNOP", "AIza" + "B" * 35, "sk_live_abcdefghijklmn",
               "xoxb-1234567890-abcdef", "sk-ant-api03-abcdefghijkl"]
    for secret in secrets:
        assert redact(f"guidance: use {secret} please") == f"guidance: use {MASK} please", secret
    assert redact("bearer abcdefghijklmnop") == f"bearer {MASK}"
    assert redact("use api key sk-GUIDANCESECRET9876543210 and password=hunter3") == \
        f"use api key {MASK} and password={MASK}"
    assert redact('{"api_key": "abcdef123", "Secret_Key": \'s3cr3tvalue\', "token": "abcdefgh1"}') == \
        f'{{"api_key": "{MASK}", "Secret_Key": \'{MASK}\', "token": "{MASK}"}}'
    for named in ("HF_TOKEN=abcdefghij1234", "OPENAI_API_KEY=abcdefgh12345678", "export DB_PASSWORD=hunter2hunter2",
                  "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"):
        value = named.split("=")[-1].strip()
        assert redact(named) == named[: len(named) - len(value)] + MASK, named
    assert redact('{\\"api_key\\": \\"abc123defg\\"}') == f'{{\\"api_key\\": \\"{MASK}\\"}}'
    untouched = ('{"max_batched_tokens":32768,"num_speculative_tokens":3,"tokens":1024,"token_budget":8192}',
                 "max_batched_tokens=32768,chunked_prefill_size=32768", "ttft_ms: 123.4", "prefix_hash token=5",
                 "routed experts: fp4, shared: bf16", "gh200x4 cluster", "per prompt token: gpt-oss-120b",
                 "secret: /run/secrets/hf", "api_key = os.environ.get(LM_API_KEY_ENV)", "monkey: abcdefgh12345",
                 "cannot read '/etc/passwd': Permission denied", "'C:\\keys\\api_key': Permission2 denied",
                 "/tmp/auth_token: abcdef12345 exists")
    assert redact("settings.api_key = 'abcd1234efgh'") == f"settings.api_key = '{MASK}'"
    for text in untouched:
        assert redact(text) == text, text
