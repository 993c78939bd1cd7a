import pytest

from hara.data.format import format_completion, format_prompt
from hara.models.tokenizer import DEFAULT_TOKENIZER, TOKENIZERS, build_tokenizer, load_tokenizer

TEXT = format_prompt("What is 3/4 + 5 × 2?") + format_completion("3/4 + 10 = 43/4.", "43/4") + "\n  é"


@pytest.fixture(scope="module")
def char():
    return build_tokenizer("char")


def test_char_round_trip_one_token_per_ascii_char(char):
    ascii_text = format_prompt("Solve for x: 3x - 5 = 7.") + format_completion("3x = 12. x = 4.", "4")
    ids = char(ascii_text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(ascii_text)
    assert char.decode(ids) == ascii_text
    assert char.decode(char(TEXT)["input_ids"]) == TEXT  # non-ASCII falls back to bytes, never <unk>
    assert char("!a 0")["input_ids"] == [3, 67, 223, 18]  # fixed ids: saved models stay readable by new builds


def test_char_special_tokens_distinct_and_not_added(char):
    specials = {char.pad_token_id, char.bos_token_id, char.eos_token_id}
    assert len(specials) == 3 and None not in specials
    ids = char("abc")["input_ids"]  # no bos/eos added, so TRL and lighteval see the same prompt ids
    assert ids == char("abc", add_special_tokens=False)["input_ids"] and len(ids) == 3
    assert char.decode(ids + [char.eos_token_id], skip_special_tokens=True) == "abc"


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_save_and_reload_gives_same_ids(name, tmp_path):
    tokenizer = build_tokenizer(name)
    tokenizer.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again(TEXT)["input_ids"] == tokenizer(TEXT)["input_ids"]
    assert again.decode(again(TEXT)["input_ids"]) == TEXT
    assert (again.eos_token_id, again.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert len(again) == len(tokenizer)


def test_qwen3_is_the_real_vocabulary():
    qwen = build_tokenizer("qwen3")
    assert len(qwen) == 151669 and qwen.eos_token == "<|endoftext|>"
    words = "The answer is the number of apples that Ann gives away."
    assert len(qwen(words)["input_ids"]) < len(words) / 3  # real BPE merges: whole words are single tokens


def test_unknown_tokenizer_lists_valid_names():
    with pytest.raises(ValueError, match="char.*qwen3"):
        build_tokenizer("wordpiece")
    assert DEFAULT_TOKENIZER in TOKENIZERS
