"""What the paper states (docs/method.md, "The paper's numbers"): quoted only from its public abstract and summary.
Every number here is the paper's; the report prints them next to ours, labelled as the paper's. The claim each
analysis section tests is part of its declaration (hara.analysis.registry).
"""

from __future__ import annotations

from importlib import resources

import yaml

__all__ = ["CLAIMS_PATH", "PAPER_EFFECTS", "PAPER_NUMBERS", "STRUCTURE_NOTE"]

#: The claims file: the paper's statements that the harness can measure, and how (hara.report.repro). Package data
#: (hara/analysis/paper_claims.yaml), so an installed package reads it as a checkout does.
CLAIMS_PATH = resources.files("hara.analysis") / "paper_claims.yaml"

#: Paper's headline numbers (docs/method.md, "The paper's numbers") keyed by what they measure, from the claims file.
#: None of these is ever used as one of our results.
_CLAIMS_FILE = yaml.safe_load(CLAIMS_PATH.read_text(encoding="utf-8"))["claims"]
PAPER_NUMBERS: dict[str, str] = {key: str(entry["paper"]) for key, entry in _CLAIMS_FILE.items()}

#: The size of the effect each claim states, in the measure's own units (pass@1 differences as fractions, speed-ups as
#: ratios), where the paper gives a number: the default low-power threshold of the report's comparisons and what
#: `hara plan` asks the grid to detect.
PAPER_EFFECTS: dict[str, float] = {
    key: float(entry["effect"]) for key, entry in _CLAIMS_FILE.items() if entry.get("effect") is not None
}

#: Ours, not the paper's: what the W / GW / FGW comparison depends on, said in the variants and interpretability
#: sections (hara.ot.exact, "Structures").
STRUCTURE_NOTE = (
    "Structure 'position' is training's: C[t,t'] = |p_t - p_t'|, under which GW (α=1) sees only "
    "rollout lengths and token positions, never the hidden states, so GW there is a length-only "
    "method; structure 'hidden' uses distances between a rollout's own hidden states (the usual FGW "
    "structure matrix), solved exactly with POT, so GW there sees the states."
)
