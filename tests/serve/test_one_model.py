"""One loaded model serves every request's options: a CTranslate2 service answering requests with mixed beams,
n-best lists and sentence splitting loads the model once, and its resident memory stays within less than one more
copy of the model."""

import random
import re
from pathlib import Path

import pytest
import torch

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data.trained_on import record_trained_on
from tests.helpers import SENTENCES, tiny_tokenizer


ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from hf_vanilla_transformer.serve.app import create_app  # noqa: E402


def resident_bytes() -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) * 1024


def wide_model(folder: Path) -> tuple[Path, int]:
    """An untrained model of some 60 MB of weights (its translations stop at 8 tokens), and that size."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), d_model=512, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=4096,
        decoder_ffn_dim=4096, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.generation_config = config.paper_generation_config(max_length=9)
    languages = dict(source_lang="de", target_lang="en", max_source_length=None, max_target_length=None)
    record_trained_on(model.generation_config, type("Languages", (), languages))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident memory from /proc")
def test_a_ctranslate2_service_holds_one_model_whatever_the_requests_options(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    folder, size = wide_model(tmp_path / "model")
    loads, load = [], ctranslate2.Translator
    monkeypatch.setattr(ctranslate2, "Translator", lambda *a, **k: loads.append(a) or load(*a, **k))
    app = create_app(model=str(folder), backend="ctranslate2", device="cpu", threads=1, max_beams=5)
    rng = random.Random(0)
    german = SENTENCES[0::2]
    with TestClient(app) as client:
        assert client.post("/translate", json={"q": german[0], "source": "de", "target": "en"}).status_code == 200
        before = resident_bytes()
        for i in range(200):
            beams = rng.randint(1, 5)
            if i % 4 == 0:  # LibreTranslate's route: alternatives widen the beam
                body = {"q": german[i % 6], "source": "de", "target": "en", "alternatives": rng.randint(0, 2)}
                answer = client.post("/translate", json=body)
            else:
                body = {"texts": german[: 1 + i % 6], "num_beams": beams, "nbest": rng.randint(1, beams)}
                answer = client.post("/v1/translate", json={**body, "split_sentences": bool(i % 3)})
            assert answer.status_code == 200, answer.text
        growth = resident_bytes() - before
    assert len(loads) == 1
    assert growth < size, f"the service grew by {growth / 2**20:.0f} MiB, a model is {size / 2**20:.0f} MiB"
