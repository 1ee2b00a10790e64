"""IFEval through lm-eval's checkers (loose): for every instruction_id of the shipped IFEval files, one
response that follows it passes and one that breaks it fails."""

from __future__ import annotations

import json

import pytest

from anchorft.eval.ifeval import ifeval_available, ifeval_follows

ok, why = ifeval_available()
pytestmark = pytest.mark.skipif(not ok, reason=why)


def check_instruction(response: str, instruction_id: str, kwargs: dict | None = None, prompt: str = "") -> bool:
    """One instruction under the loose test."""
    return ifeval_follows(response, [{"instruction_id": instruction_id, "kwargs": kwargs or {}}], prompt)[0]


# instruction_id -> (kwargs, prompt, following response, breaking response)
CASES = {
    "punctuation:no_comma": ({}, "", "Hello world", "Hello, world"),
    "length_constraints:number_words": (
        {"relation": "at least", "num_words": 5}, "", "one two three four five six", "one two"
    ),
    "keywords:forbidden_words": ({"forbidden_words": ["apple"]}, "", "I like pears.", "I like the apple."),
    "length_constraints:number_sentences": (
        {"relation": "at least", "num_sentences": 3}, "", "It rains. We stay in. We read. We sleep.", "It rains."
    ),
    "detectable_format:number_highlighted_sections": (
        {"num_highlights": 2}, "", "See *part one* and *part two*.", "See *part one* only."
    ),
    "combination:repeat_prompt": (
        {"prompt_to_repeat": "Write a poem about rain."}, "Write a poem about rain.",
        "Write a poem about rain. Drops fall on the roof.", "Drops fall on the roof.",
    ),
    "change_case:english_lowercase": ({}, "", "all of this is lower case.", "Not All Lower Case."),
    "startend:quotation": ({}, "", '"wrapped in quotes"', "not wrapped in quotes"),
    "keywords:frequency": (
        {"keyword": "cat", "frequency": 2, "relation": "at least"}, "", "A cat and a cat.", "A cat."
    ),
    "keywords:existence": ({"keywords": ["moon", "sun"]}, "", "The moon and the sun.", "The moon alone."),
    "detectable_format:title": ({}, "", "<<Rain Song>>\nDrops fall.", "Rain Song\nDrops fall."),
    "keywords:letter_frequency": (
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "", "zig zag", "zig tag"
    ),
    "detectable_format:number_bullet_lists": ({"num_bullets": 2}, "", "* first\n* second", "* first"),
    "language:response_language": (
        {"language": "en"}, "",
        "The weather today is sunny and warm, and many people are walking in the park with their families.",
        "Le temps est ensoleillé aujourd'hui et beaucoup de gens se promènent dans le parc avec leurs familles.",
    ),
    "detectable_content:number_placeholders": (
        {"num_placeholders": 2}, "", "Send it to [name] at [address].", "Send it to [name]."
    ),
    "length_constraints:number_paragraphs": ({"num_paragraphs": 2}, "", "First part.\n***\nSecond part.", "One part."),
    "startend:end_checker": (
        {"end_phrase": "Any other questions?"}, "", "That is all. Any other questions?", "That is all."
    ),
    "change_case:english_capital": ({}, "", "ALL OF THIS IS UPPER CASE.", "not upper case."),
    "change_case:capital_word_frequency": (
        {"capital_frequency": 2, "capital_relation": "at least"}, "", "THIS IS big.", "THIS is big."
    ),
    "combination:two_responses": ({}, "", "First answer.\n******\nSecond answer.", "Only one answer."),
    "detectable_content:postscript": ({"postscript_marker": "P.S."}, "", "Hello.\nP.S. See you.", "Hello."),
    "detectable_format:json_format": ({}, "", '{"answer": 1}', "answer: 1"),
    "detectable_format:multiple_sections": (
        {"section_spliter": "Section", "num_sections": 2}, "", "Section 1\nfoo\nSection 2\nbar", "Section 1\nfoo"
    ),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"}, "",
        "The plan is set.\n\nHowever, it may change.", "The plan is set.\n\nMoreover, it may change.",
    ),
    "detectable_format:constrained_response": ({}, "", "My answer is yes.", "Sure thing, I think so."),
}  # fmt: skip


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_following_response_passes_and_breaking_one_fails(instruction_id):
    kwargs, prompt, good, bad = CASES[instruction_id]
    assert check_instruction(good, instruction_id, kwargs, prompt), f"{instruction_id}: {good!r} should pass"
    assert not check_instruction(bad, instruction_id, kwargs, prompt), f"{instruction_id}: {bad!r} should fail"


def test_every_shipped_instruction_id_has_a_case(bench_root):
    ids = set()
    for name in ("ifeval_loose.jsonl", "ifeval_loose_test.jsonl"):
        path = bench_root / "ood" / name
        if not path.is_file():
            pytest.skip(f"{path} absent")
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                ids |= {i["instruction_id"] for i in json.loads(line)["reward_model"]["instructions"]}
    assert ids and ids <= set(CASES), sorted(ids - set(CASES))


def test_loose_variant_forgives_a_first_line_and_asterisks():
    # the strict test fails both (a preamble line before the quotation; `**` around a lowercase text)
    assert check_instruction('Sure, here it is:\n"wrapped"', "startend:quotation")
    assert check_instruction("**all lower case**", "change_case:english_lowercase")
    # a comma in a middle line survives every loose variant
    assert not check_instruction('Sure here it is:\n"wrapped", yes\nand more', "punctuation:no_comma")


def test_all_instructions_must_hold_and_null_kwargs_are_dropped():
    # the shipped files give every kwarg key, most of them null (IFEval's own format)
    null = dict.fromkeys(["num_words", "relation", "keyword", "frequency"])
    insts = [
        {"instruction_id": "punctuation:no_comma", "kwargs": dict(null)},
        {"instruction_id": "keywords:existence", "kwargs": {**null, "keywords": ["moon"]}},
    ]
    assert ifeval_follows("The moon rises", insts, "")[0]
    all_ok, each = ifeval_follows("The sun, rising", insts, "")
    assert not all_ok and each == [False, False]
    assert ifeval_follows("The moon, rising", insts, "") == (False, [False, True])


def test_unknown_instruction_id_is_an_error():
    with pytest.raises(ValueError, match="unknown IFEval"):
        check_instruction("x", "not:an_instruction")


def test_an_instruction_without_a_string_id_is_an_error():
    for bad in ({"kwargs": {}}, {"instruction_id": 3, "kwargs": {}}, "punctuation:no_comma"):
        with pytest.raises(ValueError, match="each instruction must be"):
            ifeval_follows("x", [{"instruction_id": "punctuation:no_comma", "kwargs": {}}, bad], "")
