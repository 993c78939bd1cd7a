"""A credit-assignment method from outside hara, as a plug-in package would ship it (tests/test_methods.py installs
it through a stand-in ``hara.methods`` entry point): token advantages scaled up where the sampling entropy is high.
The example of docs/methods.md; its knobs are a dataclass, checked and default-filled under hara.plugins.flip_late."""

from __future__ import annotations

from dataclasses import dataclass

from hara.knobs import knob
from hara.methods import MethodSpec


@dataclass(frozen=True)
class FlipLateParams:
    scale: float = knob(1.0, "Extra weight per nat of token entropy.", minimum=0, maximum=10)


def flip_late(advantages, completion_mask, group_ids, rewards, context):
    weights = 1.0 + context.params.scale * context.token_entropies
    token_advantages = advantages[:, None] * weights * completion_mask
    return token_advantages, {"flip_late/w_mean": float(weights[completion_mask].mean())}


SPEC = MethodSpec(
    "flip_late",
    "baseline",
    needs=frozenset({"entropy"}),
    namespace="flip_late/",
    weighting="tests.method_plugin:flip_late",
    params="tests.method_plugin:FlipLateParams",
)
NOT_A_SPEC = {"name": "broken"}
