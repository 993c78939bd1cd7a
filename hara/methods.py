"""The method registry: everything the harness knows about an advantage transform, declared once.

A :class:`MethodSpec` names the transform (``weighting``, a "module:function" reference imported on first use) and
its knobs (``params``, a dataclass whose fields carry their schema, hara/knobs.py), says what it reads from the
training context (``needs``: one layer's hidden states, token entropies), which config section holds its knobs, the
namespace of the metrics it logs, and its kind (the plain RLVR baseline, a HarA variant, or a credit-assignment
baseline). Built-ins and plug-ins are declared alike and read alike: the trainer, `hara train`, config and sweep
validation, the memory planner and the report read them from here.

Methods from outside the repository: a package declares an entry point in the ``hara.methods`` group whose object is
a :class:`MethodSpec` (or a list of them); :data:`METHODS` (a :class:`hara.plugins.Registry`, read through
:func:`methods` and :func:`get_method`) loads every such entry point once, at its first lookup, so ``grid.methods``
and ``hara train --method`` accept the new name; :func:`register_method` adds one from any module. Every registered
method, built in or not, passes the same contract tests (tests/test_methods.py). This module imports nothing heavy
(no torch), so config validation stays fast: the built-ins' transforms and params are references until first used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hara.knobs import read_knobs
from hara.plugins import Registry, load_reference

__all__ = [
    "CAPTURED",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "METHODS",
    "NEEDS",
    "NEED_SOURCES",
    "MethodSpec",
    "get_method",
    "methods",
    "register_method",
]

ENTRY_POINT_GROUP = "hara.methods"
#: none: the plain RLVR baseline the report compares against; hara: a HarA variant; baseline: another
#: credit-assignment method of the paper's comparison; oracle: a control that reads what only the synthetic
#: world knows (kept out of the paper's claims, of "baselines" and of the other comparisons' correction families).
KINDS = ("none", "hara", "baseline", "oracle")
#: hidden: one layer's hidden states; entropy: token entropies; steps: where each rollout's first wrong step starts
#: (the synthetic world's step oracle, hara/data/steps.py: needs data.source synthetic).
NEEDS = ("hidden", "entropy", "steps")
#: A control's expected verdict against none, and what that makes it.
EXPECTED_VERDICTS = {"better": "positive control", "worse": "negative control"}
#: The needs the trainer's hooks record from the model (the others come from the problems).
CAPTURED = frozenset({"hidden", "entropy"})
#: What each need asks of the problems: the data sources that can supply it (absent: any source).
NEED_SOURCES = {"steps": ("synthetic",)}


@dataclass(frozen=True)
class MethodSpec:
    """One advantage transform, as every part of the harness sees it."""

    name: str
    kind: str
    section: str | None = None  # its knobs' config section, hara.<section> (None: hara.plugins.<name>)
    needs: frozenset[str] = field(default_factory=frozenset)  # what the trainer captures for it
    namespace: str | None = None  # its info metrics' prefix, kept as-is in metrics.jsonl (others become trl/...)
    novelty_fp32: bool = False  # its novelty code converts the captured rows to fp32 (hara plan counts the copy)
    weighting: str | None = None  # "module:function" of its transform, imported on first use
    # "module:Class" of its knobs' dataclass (hara/knobs.py), imported on first use: the transform gets context.params
    # as one (None: as the config's mapping)
    params: str | None = None
    # a control's (kind oracle) expected verdict against none: better (a positive control: the grid sees credit
    # when it separates) or worse (a negative control, a sabotage: it must lose)
    expect: str = "better"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name!r}: kind {self.kind!r} (valid: {', '.join(KINDS)})")
        unknown = sorted(set(self.needs) - set(NEEDS))
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown needs {unknown} (valid: {', '.join(NEEDS)})")
        if self.expect not in EXPECTED_VERDICTS:
            raise ValueError(f"method {self.name!r}: expect {self.expect!r} (valid: {', '.join(EXPECTED_VERDICTS)})")
        if self.namespace is not None and not self.namespace.endswith("/"):
            raise ValueError(f"method {self.name!r}: namespace {self.namespace!r} must end with '/'")

    @property
    def captures(self) -> frozenset[str]:
        """What the trainer's hooks record from the model for it (hidden states, entropies)."""
        return self.needs & CAPTURED

    def load_weighting(self) -> Any:
        """Its transform function (imported on first use)."""
        return load_reference(self.weighting, f"method {self.name!r}: weighting")

    def params_type(self) -> type | None:
        """Its knobs' dataclass (imported on first use), None when it declares none."""
        return None if self.params is None else load_reference(self.params, f"method {self.name!r}: params")

    @property
    def knobs_path(self) -> tuple[str, ...]:
        """Where the config holds its knobs: hara.<section>, or hara.plugins.<name> for a method without a section."""
        return ("hara", self.section) if self.section else ("hara", "plugins", self.name)

    def knobs(self, config: Mapping) -> dict[str, Any]:
        """Its knobs as the resolved config holds them (a flat mapping; {} where the config has none)."""
        node: Any = config
        for part in self.knobs_path:
            node = node.get(part, {})
        return dict(node)

    def read_params(self, values: Mapping[str, Any] | Any) -> Any:
        """Its knobs (a flat mapping, or already its params) as its params dataclass; an unknown knob raises a
        ValueError naming it. A method without a params dataclass gets the mapping as it is."""
        cls = self.params_type()
        return dict(values) if cls is None else read_knobs(cls, values, f"weighting {self.name!r}")


_HIDDEN, _ENTROPY = frozenset({"hidden"}), frozenset({"entropy"})
_HARA, _BASELINES, _ORACLE = "hara.weighting.hara", "hara.weighting.baselines", "hara.weighting.oracle"
_BUILT_IN = [
    MethodSpec("none", "none", weighting=f"{_BASELINES}:none", params="hara.knobs:NoKnobs"),
    *(
        MethodSpec(
            name,
            "hara",
            "hara",
            _HIDDEN,
            "hara/",
            novelty_fp32=True,
            weighting=f"{_HARA}:{name}",
            params=f"{_HARA}:HaraParams",
        )
        for name in ("hara_tok", "hara_seq", "hara_hier", "hara_exact_tok", "hara_exact_seq")
    ),
    MethodSpec(
        "forking_tokens",
        "baseline",
        "forking_tokens",
        _ENTROPY,
        "forking/",
        weighting=f"{_BASELINES}:forking_tokens",
        params=f"{_BASELINES}:ForkingParams",
    ),
    *(
        MethodSpec(
            name,
            "baseline",
            "entropy_shaping",
            _ENTROPY,
            f"{name}/",
            weighting=f"{_BASELINES}:{name}",
            params=f"{_BASELINES}:EntropyShapingParams",
        )
        for name in ("gtpo", "grpo_s")
    ),
    MethodSpec(
        "position", "baseline", "position", weighting=f"{_BASELINES}:position", params=f"{_BASELINES}:PositionParams"
    ),
    MethodSpec(
        "shear",
        "baseline",
        "shear",
        _HIDDEN,
        "shear/",
        weighting=f"{_BASELINES}:shear",
        params=f"{_BASELINES}:ShearParams",
    ),
    # the step oracle's modes (hara/weighting/oracle.py): suffix (the first control), step, reversed (a sabotage),
    # process
    *(
        MethodSpec(
            name,
            "oracle",
            "oracle_steps",
            frozenset({"steps"}),
            "oracle/",
            weighting=f"{_ORACLE}:{name}",
            params=f"{_ORACLE}:OracleParams",
            expect=expect,
        )
        for name, expect in (
            ("oracle_steps", "better"),
            ("oracle_step", "better"),
            ("oracle_reversed", "worse"),
            ("oracle_process", "better"),
        )
    ),
]
#: Every method: the built-ins, then what installed packages declare in the ``hara.methods`` entry point group.
METHODS: Registry[MethodSpec] = Registry(
    "method",
    _BUILT_IN,
    group=ENTRY_POINT_GROUP,
    accepts=lambda spec: isinstance(spec, MethodSpec) and spec.weighting is not None,
    what="MethodSpec(s) with weighting='module:function'",
)
methods, get_method, register_method = METHODS.entries, METHODS.get, METHODS.register
