import json
import os
import subprocess
import sys

import pytest
import torch

from hara.models.tiny import TINY_SIZES, build_tiny_model, count_parameters
from hara.models.tokenizer import build_tokenizer
from hara.runinfo import set_threads


@pytest.fixture(scope="module")
def tokenizer():
    set_threads(1)  # two threads on a loaded 2-core machine can be 14x slower
    return build_tokenizer("char")


def test_sizes_grow_in_parameters_depth_and_width(tokenizer):
    sizes = list(TINY_SIZES)
    assert sizes == ["tiny-s", "tiny-m", "tiny-l"]
    counts = [count_parameters(build_tiny_model(s, tokenizer, seed=0)) for s in sizes]
    assert counts == sorted(counts) and len(set(counts)) == 3
    assert [TINY_SIZES[s].num_hidden_layers for s in sizes] == sorted({TINY_SIZES[s].num_hidden_layers for s in sizes})
    assert [TINY_SIZES[s].hidden_size for s in sizes] == sorted({TINY_SIZES[s].hidden_size for s in sizes})


def test_model_is_qwen3_with_tokenizer_vocabulary(tokenizer):
    model = build_tiny_model("tiny-s", tokenizer, seed=0)
    assert model.config.model_type == "qwen3"
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as in the small real Qwen3 models


def test_same_seed_same_weights_other_seed_other_weights(tokenizer):
    a, b, c = (build_tiny_model("tiny-s", tokenizer, seed=s) for s in (3, 3, 4))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_unknown_size_lists_valid_sizes(tokenizer):
    with pytest.raises(ValueError, match="tiny-s, tiny-m, tiny-l"):
        build_tiny_model("tiny-xl", tokenizer, seed=0)


def test_save_and_reload_offline(tokenizer, tmp_path):
    model = build_tiny_model("tiny-s", tokenizer, seed=0).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ids = tokenizer("Question: 1 + 1\nAnswer:", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model(ids).logits[0, -1, :5].tolist()
    script = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "ids = t('Question: 1 + 1\\nAnswer:', return_tensors='pt')['input_ids']\n"
        "with torch.no_grad():\n"
        "    print(json.dumps([type(m).__name__, m(ids).logits[0, -1, :5].tolist()]))\n"
    )
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(tmp_path / "empty_hf_home"),
    )  # an empty cache: nothing can come from the hub
    # The timeout only guards against a hang: importing transformers alone took 69 s in a loaded CI run, and 120 s
    # once timed out while other jobs ran beside the suite.
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    name, logits = json.loads(done.stdout.strip().splitlines()[-1])
    assert name == "Qwen3ForCausalLM"
    assert logits == pytest.approx(expected, abs=1e-5)
