"""Short names of the paper's datasets -> hub ids (the schemas live in hara.data.hub).

The short names are what configs, result paths and MLflow metric keys use (``eval/math500/pass@1``).
"""

HUB_BENCHMARKS: dict[str, str] = {
    "math500": "HuggingFaceH4/MATH-500",
    "aime24": "HuggingFaceH4/aime_2024",
    "amc23": "math-ai/amc23",
    "minerva": "math-ai/minervamath",
    "olympiadbench": "Hothan/OlympiadBench",
}

HUB_TRAIN_SETS: tuple[str, ...] = ("hiyouga/math12k", "joyheyueya/math500")
