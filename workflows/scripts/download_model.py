"""Download one hub model snapshot (config models.hub_ids[size]) and copy it into models.local_dir/<size>.

Only the files `from_pretrained` reads (config, weights as safetensors, tokenizer) are fetched, not the duplicate
PyTorch .bin weights some repositories also hold. The snapshot goes through the Hugging Face cache (HF_HOME), as
every hub client does: with HF_HUB_OFFLINE=1 an earlier download is found there (the rehearsal's path; a download
into a local_dir is not looked up offline), and the copy into the output folder is renamed into place only when
complete. An unreachable hub fails the job with the model id in the log.
"""

import contextlib
import shutil
from pathlib import Path

from huggingface_hub import snapshot_download

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive

MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def download(hub_id: str, out_dir: str) -> None:
    """Fetch the snapshot of ``hub_id`` into the cache and copy its files (not the cache's links) to ``out_dir``."""
    print(f"downloading {hub_id} -> {out_dir}")
    snapshot = snapshot_download(repo_id=hub_id, allow_patterns=MODEL_FILES)
    partial = Path(f"{out_dir}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(snapshot, partial, symlinks=False)
    partial.rename(out_dir)
    print(f"done: {snapshot} -> {out_dir}")


with open(snakemake.log[0], "w", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
        contextlib.redirect_stderr(log):
    download(snakemake.params.hub_id, snakemake.output.snapshot)
