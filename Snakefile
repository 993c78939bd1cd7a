"""HarA reproduction DAG: data -> base_model -> train (size x rlvr x method x seed) -> evaluate -> report.

    snakemake --cores 2                                         # the embedded CPU default (config/default.yaml)
    snakemake --cores 2 --configfile config/smoke.yaml          # the seconds-long test config
    snakemake --profile slurm --configfile config/paper.yaml    # the full reproduction on Slurm (repo root)

The config is validated by hara.config, the same loader as the `hara` CLI: defaults filled from the config schema
(hara/schemas/config.yaml, package data), unknown keys rejected, one-line errors naming the key.
"""

import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, update_config

from hara.config import ConfigError, read_yaml, validate_config

min_version("9.0")

# No `configfile:` directive on purpose: Snakemake would merge it with --configfile (paper.yaml would inherit the
# default's warm-up and sampling keys). --configfile replaces the default; --config KEY=VALUE overrides either.
CONFIG_SOURCE = workflow.overwrite_configfiles[-1] if workflow.overwrite_configfiles else "config/default.yaml"
_raw = {} if workflow.overwrite_configfiles else read_yaml(os.path.join(workflow.basedir, "config", "default.yaml"))
update_config(_raw, config)
try:
    # data.local_dir is written by `hara fetch-data`: a dry run of the paper grid must work before the fetch.
    _resolved = validate_config(_raw, source=str(CONFIG_SOURCE), skip_checks=("check_local_folders",))
except ConfigError as error:
    raise WorkflowError(f"invalid config: {error}") from None
config.clear()
config.update(_resolved)


include: "workflows/common.smk"


# Wildcards match only the config's own names, so a path can never be claimed by the wrong rule.
wildcard_constraints:
    size=alternatives(SIZES),
    rlvr=alternatives(GRID["rlvr"]),
    method=alternatives(METHODS),
    seed=r"\d+",


if GATES:

    include: "workflows/preflight.smk"


include: "workflows/data.smk"
include: "workflows/models.smk"
include: "workflows/train.smk"
include: "workflows/evaluate.smk"
include: "workflows/analyses.smk"  # after train.smk and evaluate.smk: its rules reuse theirs (use rule ... with)


if SWEEPS:  # the config lists study files

    include: "workflows/sweeps.smk"


include: "workflows/report.smk"


rule all:
    input:
        final_targets(),
        SWEEP_TARGETS,
    default_target: True


onsuccess:
    print(
        f"Report: {REPORT_PAGE}. Runs, verdicts and minimum detectable effects in the MLflow UI: "
        f"hara ui --config {CONFIG_FILE} (prints the link that opens the runs table, then serves the store)"
    )
