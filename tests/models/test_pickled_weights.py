"""A model or adapter folder whose weights are only pickles (pytorch_model.bin, adapter_model.bin, *.pt) is refused
before anything loads them: campaign never unpickles a file from a model folder."""
from __future__ import annotations

import json

import pytest

from campaign.errors import InputError
from campaign.models.resolve import require_safetensors
from tests.conftest import tiny_llama


@pytest.mark.parametrize("name", ["pytorch_model.bin", "adapter_model.bin", "model.pt", "weights.ckpt"])
def test_only_pickled_weights_are_refused_naming_the_file(tmp_path, name):
    (tmp_path / name).write_bytes(b"\x80\x04not loaded")
    with pytest.raises(InputError, match=rf"weights are pickles \({name}\), which campaign never loads; convert"):
        require_safetensors(tmp_path)


def test_safetensors_beside_a_pickle_are_used(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert require_safetensors(tmp_path) == tmp_path
    empty = tmp_path / "empty"
    empty.mkdir()
    assert require_safetensors(empty) == empty  # no weights at all: the loader says what is missing


def test_quant_refuses_a_reference_folder_of_pickles_before_loading(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from campaign.compress.setup import QuantSetup
    from campaign.compress.variant import reference_model

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_llama()))
    marker = tmp_path / "unpickled"
    # a pickle that would create a file if it were ever loaded: it must not be
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    (folder / "pytorch_model.bin").write_bytes(payload)
    with pytest.raises(InputError, match="pytorch_model.bin"):
        reference_model(QuantSetup(model=str(folder), batches=[]), None)
    assert not marker.exists()
