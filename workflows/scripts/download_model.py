"""Download one hub model snapshot (config models.hub_ids[size]) and copy it into models.local_dir/<size>.

Only the files `from_pretrained` reads are fetched (hara.models.base.download_snapshot). The snapshot goes through
the Hugging Face cache (HF_HOME), as every hub client does: with HF_HUB_OFFLINE=1 an earlier download is found there
(the rehearsal's path; a download into a local_dir is not looked up offline), and the copy into the output folder is
renamed into place only when complete. An unreachable hub fails the job with the model id in the log.
"""

import contextlib

from hara.models.base import download_snapshot

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive


def download(hub_id: str, out_dir: str) -> None:
    print(f"downloading {hub_id} -> {out_dir}")
    snapshot = download_snapshot(hub_id, out_dir)
    print(f"done: {snapshot} -> {out_dir}")


with (
    open(snakemake.log[0], "w", encoding="utf-8") as log,
    contextlib.redirect_stdout(log),
    contextlib.redirect_stderr(log),
):
    download(snakemake.params.hub_id, snakemake.output.snapshot)
