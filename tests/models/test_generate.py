import pytest

from hara.data.synthetic import generate_problems
from hara.models.generate import generate_completions, generate_ids, load_model, measure_accuracy
from hara.models.tiny import build_tiny_model
from hara.models.tokenizer import build_tokenizer
from hara.runinfo import set_threads

PROMPTS = ["Question: What is 2 + 2?\nAnswer:", "Question: Find gcd(12, 18) and explain.\nAnswer:", "Q"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer("char")
    build_tiny_model("tiny-s", tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def loaded(model_dir):
    set_threads(1)  # two threads on a loaded 2-core machine can be 14x slower
    return load_model(model_dir)


def test_max_new_tokens_is_respected(loaded):
    model, tokenizer = loaded
    for max_new in (1, 7):
        for greedy in (True, False):
            rows = generate_ids(model, tokenizer, PROMPTS, greedy=greedy, max_new_tokens=max_new, seed=0)
            assert len(rows) == len(PROMPTS) and all(1 <= len(r) <= max_new for r in rows)
            assert any(len(r) == max_new for r in rows)  # an untrained model rarely says eos: runs to the limit


def test_left_padding_does_not_change_greedy_output(loaded):
    model, tokenizer = loaded
    batched = generate_completions(model, tokenizer, PROMPTS, greedy=True, max_new_tokens=12)
    alone = [generate_completions(model, tokenizer, [p], greedy=True, max_new_tokens=12)[0] for p in PROMPTS]
    assert batched == alone


def test_generation_stops_at_eos(loaded):
    model, tokenizer = loaded
    free = generate_ids(model, tokenizer, PROMPTS, greedy=True, max_new_tokens=12)
    stop_id = free[0][2]  # make the third greedy token of row 0 the eos token
    tokenizer = tokenizer.__class__.from_pretrained(
        tokenizer.name_or_path, eos_token=tokenizer.convert_ids_to_tokens(stop_id)
    )
    assert tokenizer.eos_token_id == stop_id
    stopped = generate_ids(model, tokenizer, PROMPTS, greedy=True, max_new_tokens=12)
    assert len(stopped[0]) <= 3 and stopped[0][-1] == stop_id
    for full, cut in zip(free, stopped):  # every row: the free completion up to its first eos, nothing after
        assert cut == (full[: full.index(stop_id) + 1] if stop_id in full else full)
    texts = generate_completions(model, tokenizer, PROMPTS, greedy=True, max_new_tokens=12)
    assert texts[0] == tokenizer.decode(stopped[0][:-1])  # eos is not part of the text


def test_sampling_is_seeded(loaded):
    model, tokenizer = loaded
    kw = dict(greedy=False, temperature=1.0, top_p=0.95, max_new_tokens=16)
    first = generate_completions(model, tokenizer, PROMPTS, seed=5, **kw)
    assert first == generate_completions(model, tokenizer, PROMPTS, seed=5, **kw)
    assert first != generate_completions(model, tokenizer, PROMPTS, seed=6, **kw)


def test_measure_accuracy_scores_each_benchmark(model_dir):
    benchmarks = {"easy": generate_problems(6, seed=1, levels=(1,)), "hard": generate_problems(4, seed=2, levels=(5,))}
    always = measure_accuracy(
        model_dir, benchmarks, greedy=True, max_new_tokens=4, limit=3, reward_fn=lambda completion, gold: 1.0
    )
    assert always["accuracy"] == {"easy": 1.0, "hard": 1.0} and always["average"] == 1.0
    assert always["n"] == {"easy": 3, "hard": 3}
    untrained = measure_accuracy(model_dir, benchmarks, greedy=False, temperature=0.8, max_new_tokens=8, seed=0)
    assert untrained["accuracy"] == {"easy": 0.0, "hard": 0.0}  # default reward: math-verify on a \boxed{} answer
    assert untrained["temperature"] == 0.8 and set(untrained["boxed"]) == {"easy", "hard"}
    assert set(untrained["direct"]) == {"easy", "hard"} and untrained["direct"]["easy"] == 0.0


def test_direct_answers_are_counted_with_their_correctness(model_dir, monkeypatch):
    from hara.models import generate

    benchmarks = {"b": generate_problems(4, seed=1, levels=(1,))}
    answers = [r["answer"] for r in benchmarks["b"]]
    texts = [
        f" The answer is \\boxed{{{answers[0]}}}.",
        " The answer is \\boxed{-99999}.",
        f" 1 + 1 = 2. The answer is \\boxed{{{answers[2]}}}.",
        " 3 * 3 = 9.",
    ]
    monkeypatch.setattr(generate, "generate_completions", lambda *args, **kwargs: texts)
    report = measure_accuracy(model_dir, benchmarks, greedy=True)
    assert report["accuracy"] == {"b": 0.5} and report["boxed"] == {"b": 0.75}
    assert report["direct"] == {"b": 0.5} and report["direct_correct"] == {"b": 0.25}


def test_generation_stops_at_the_first_stop_string(loaded):
    """A stop string taken from each prompt's own sampled continuation (same seed): with it, the completion is that
    continuation up to the stop (excluded), and no padding is left in the ids of a row that stopped there.
    (transformers also matches a stop string that straddles the prompt's end, vLLM does not: the stop is chosen to
    avoid that.)"""
    model, tokenizer = loaded
    sample = dict(greedy=False, max_new_tokens=24, seed=0)
    for prompt in PROMPTS:
        (text,) = generate_completions(model, tokenizer, [prompt], **sample)
        stop = next(
            text[i : i + 2]
            for i in range(2, 20)
            if text[i : i + 2].isascii()
            and text[i : i + 2].isalnum()
            and (prompt + text).find(text[i : i + 2]) >= len(prompt)
        )
        (cut,) = generate_completions(model, tokenizer, [prompt], stop=(stop,), **sample)
        assert cut == text[: text.find(stop)]
        (ids,) = generate_ids(model, tokenizer, [prompt], stop=(stop,), **sample)
        assert tokenizer.pad_token_id not in ids and tokenizer.decode(ids).endswith(stop)


def test_stop_strings_are_prepared_once_per_tokenizer_and_generate_as_transformers_does(loaded, monkeypatch):
    """Building transformers' stop-string criterion scans the vocabulary (1.3 s for Qwen3's) and its own cache never
    hits with a fast tokenizer, so every generate call built it again (one per benchmark and checkpoint candidate):
    three calls with the same stops build it once (three times before), and the ids equal transformers' own
    ``generate(stop_strings=..., tokenizer=...)``, greedy and sampled."""
    import weakref

    import torch
    from transformers.generation.stopping_criteria import StopStringCriteria

    from hara.models import generate

    model, tokenizer = loaded
    monkeypatch.setattr(generate, "_STOP_CRITERIA", weakref.WeakKeyDictionary(), raising=False)  # none built yet
    built = []
    original = StopStringCriteria.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(StopStringCriteria, "__init__", counted)
    prompts = PROMPTS[:2]
    stop = tuple(sorted({text[4] for text in generate_completions(model, tokenizer, prompts, max_new_tokens=16)}))
    for greedy in (True, False, True):
        ours = generate_ids(model, tokenizer, prompts, greedy=greedy, max_new_tokens=16, seed=3, stop=stop)
        batch = tokenizer(prompts, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt")
        torch.manual_seed(3)
        sampling = {} if greedy else {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
        theirs = model.generate(
            **batch,
            do_sample=not greedy,
            max_new_tokens=16,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            stop_strings=list(stop),
            tokenizer=tokenizer,
            **sampling,
        )[:, batch["input_ids"].shape[1] :].tolist()
        assert ours == [generate.strip_padding(row, tokenizer.pad_token_id) for row in theirs]
        assert not greedy or all(len(row) <= 5 for row in ours)  # each greedy row stops by its 5th character
    assert len(built) == 1 + 3  # ours once, transformers' own path once per call


def test_generation_goes_to_the_gpu_in_bf16_when_the_job_has_one(model_dir, monkeypatch):
    """Before: every generating command loaded the model in fp32 on the CPU, also in a GPU job."""
    import torch

    from hara.models import generate

    assert generate.generation_placement(cuda=True) == ("cuda", torch.bfloat16)
    assert generate.generation_placement(cuda=False) == ("cpu", torch.float32)
    monkeypatch.setattr(generate, "generation_placement", lambda: ("cpu", torch.bfloat16))  # no CUDA here
    model, tokenizer = load_model(model_dir)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert len(generate_ids(model, tokenizer, PROMPTS[:1], max_new_tokens=3)[0]) == 3  # inputs follow the model
