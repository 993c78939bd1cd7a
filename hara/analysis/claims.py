"""What the paper states, quoted only where ../shared/method.md gives it (only the abstract and a summary of the
paper are public). Every number here is the paper's; the report prints them next to ours, labelled as the paper's.
"""

from __future__ import annotations

__all__ = ["CLAIMS", "PAPER_NUMBERS", "STRUCTURE_NOTE"]

#: Paper's headline numbers (method.md, "Claims of the paper") keyed by what they measure. None of these is ever
#: used as one of our results.
PAPER_NUMBERS: dict[str, str] = {
    "gain_vs_grpo": "up to +4.8 average points over GRPO (5 math benchmarks, Qwen3-1.7B/4B/8B-Base)",
    "gain_vs_credit": "up to +4.0 over credit-assignment baselines",
    "tok_vs_seq": "token-level beats sequence-level HarA on most datasets/models (no number given)",
    "exact_seq": "per-step time 154 (exact FGW) -> 41.0 (linearized), sequence level",
    "exact_tok": "per-step time 175 (exact FGW) -> 43.6 (linearized), token level",
    "exact_accuracy": "accuracy within 1% of exact FGW",
    "overhead": "at most +13.6% total training time",
    "speedup": "up to 2.64x speed-up to the same accuracy",
    "equal_time": "+8.7 accuracy at equal training time",
}

#: The claim each analysis section tests (method.md's wording).
CLAIMS: dict[str, str] = {
    "variants": ("W (features only, α=0) and GW (structure only, α=1) are ablations of HarA; the paper reports "
                 "FGW's interpretability advantage over both (see the interpretability section) and no accuracy "
                 "numbers for them in the public summary."),
    "exact": (f"Anchor-guided linearization: {PAPER_NUMBERS['exact_seq']}; {PAPER_NUMBERS['exact_tok']}; "
              f"{PAPER_NUMBERS['exact_accuracy']}."),
    "group_size": ("Interpretability improves monotonically with the number of sampled rollouts (no numbers in "
                   "the public summary); accuracy vs G is not reported there."),
    "efficiency": (f"Efficiency: {PAPER_NUMBERS['overhead']}, {PAPER_NUMBERS['speedup']}, "
                   f"{PAPER_NUMBERS['equal_time']}; faster convergence and higher final accuracy than GRPO."),
    "interpretability": ("MATH500 (stages labelled by an external LLM): barycenter supports map sparsely and "
                         "block-diagonally onto reasoning stages; FGW gives higher average likelihood scores than "
                         "W and GW, improving monotonically with the number of sampled rollouts (no numbers in the "
                         "public summary)."),
}

#: Ours, not the paper's: what the W / GW / FGW comparison depends on, said in the variants and interpretability
#: sections (hara.ot.exact, "Structures").
STRUCTURE_NOTE = ("Structure 'position' is training's: C[t,t'] = |p_t - p_t'|, under which GW (α=1) sees only "
                  "rollout lengths and token positions, never the hidden states, so GW there is a length-only "
                  "method; structure 'hidden' uses distances between a rollout's own hidden states (the usual FGW "
                  "structure matrix), solved exactly with POT, so GW there sees the states.")
