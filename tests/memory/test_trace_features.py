"""campaign trace MODEL feeds token ids: a model whose forward reads features (Whisper's log-mel input_features) is
refused in one line that names the input and the route that traces it (a setup with a real batch), never an
internal error from inside transformers."""
from __future__ import annotations

import json

import pytest


def test_a_model_that_reads_audio_features_is_refused_with_the_setup_route(cli, tmp_path):
    pytest.importorskip("transformers")
    config = {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "vocab_size": 96,
              "num_mel_bins": 8, "d_model": 16, "encoder_layers": 1, "decoder_layers": 1,
              "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 32,
              "decoder_ffn_dim": 32, "max_source_positions": 16, "max_target_positions": 32,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    r = cli("trace", str(tmp_path / "config.json"), "--batch", "1", "--seq-len", "8")
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "input_features" in lines[0] and "campaign trace FILE.py:FACTORY" in lines[0]
    assert "internal error" not in r.err
