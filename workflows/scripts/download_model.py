"""Download one hub model snapshot (config models.hub_ids[size]) into models.local_dir/<size>.

Only the files `from_pretrained` reads (config, weights as safetensors, tokenizer) are fetched, not the duplicate
PyTorch .bin weights some repositories also hold. An unreachable hub fails the job with the model id in the log.
"""

import contextlib

from huggingface_hub import snapshot_download

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive

MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def download(hub_id: str, out_dir: str) -> None:
    """Fetch the snapshot of ``hub_id`` into ``out_dir``."""
    print(f"downloading {hub_id} -> {out_dir}")
    path = snapshot_download(repo_id=hub_id, local_dir=out_dir, allow_patterns=MODEL_FILES)
    print(f"done: {path}")


with open(snakemake.log[0], "w", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
        contextlib.redirect_stderr(log):
    download(snakemake.params.hub_id, snakemake.output.snapshot)
