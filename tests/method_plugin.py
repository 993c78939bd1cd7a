"""A credit-assignment method from outside hara, as a plug-in package would ship it (tests/test_methods.py installs
it through a stand-in ``hara.methods`` entry point): token advantages scaled up where the sampling entropy is high."""

from __future__ import annotations

from hara.methods import MethodSpec


def flip_late(advantages, completion_mask, group_ids, rewards, context):
    weights = 1.0 + float(context.params.get("scale", 1.0)) * context.token_entropies
    token_advantages = advantages[:, None] * weights * completion_mask
    return token_advantages, {"flip_late/w_mean": float(weights[completion_mask].mean())}


SPEC = MethodSpec(
    "flip_late",
    "baseline",
    needs=frozenset({"entropy"}),
    namespace="flip_late/",
    weighting="tests.method_plugin:flip_late",
)
NOT_A_SPEC = {"name": "broken"}
