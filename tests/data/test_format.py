import pytest

from hara.data.format import format_completion, format_direct_answer, format_prompt, is_direct_answer
from hara.models.base import format_accuracy_table


@pytest.mark.parametrize(
    "completion, direct",
    [
        (format_direct_answer("7/4"), True),
        (" The answer is \\boxed{-3}.\n", True),
        ("The answer is \\boxed{12}", True),
        (format_completion("3 + 4 = 7.", "7"), False),
        (" 7. The answer is \\boxed{7}.", False),
        (" The answer is \\boxed{3}. The answer is \\boxed{4}.", False),
        (" The answer is 7.", False),
        ("", False),
    ],
)
def test_direct_answers_are_bare_boxed_answers(completion, direct):
    assert is_direct_answer(completion) is direct


def test_prompt_and_completion_shapes():
    assert format_prompt(" What is 2 + 2? ") == "Question: What is 2 + 2?\nAnswer:"
    assert format_completion(" 2 + 2 = 4. ", "4") == " 2 + 2 = 4. The answer is \\boxed{4}."


def test_accuracy_table_shows_the_direct_share_of_sampled_answers():
    def mode(accuracy, direct, temperature):
        return {
            "accuracy": accuracy,
            "average": sum(accuracy.values()) / 2,
            "direct": direct,
            "temperature": temperature,
        }

    report = {
        "greedy": mode({"a": 0.5, "b": 0.25}, {"a": 0.0, "b": 0.0}, None),
        "sampled": mode({"a": 0.25, "b": 0.125}, {"a": 0.5, "b": 0.25}, 0.8),
    }
    lines = format_accuracy_table(report).splitlines()
    assert lines[0].split() == ["benchmark", "greedy", "sampled@T=0.8", "direct", "answers"]
    assert lines[1].split() == ["a", "50.0%", "25.0%", "50.0%"]
    assert lines[-1].split() == ["average", "37.5%", "18.8%", "37.5%"]
