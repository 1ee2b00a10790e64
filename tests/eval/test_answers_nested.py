"""Answers inside nested wrappers: boxes in boxes, formatting commands in formatting commands, boxes inside
text, truncated outer boxes. Graded as the evaluation and the RL reward grade (`grade`: the last box, then
math-verify through the checker's worker, with no string shortcut), each beside a near miss that must stay wrong."""

from __future__ import annotations

import pytest

from anchorft.eval.answers import MathChecker, grade, last_boxed

# (response, gold, the extracted answer)
NESTED = [
    (r"so \boxed{\boxed{5}}", "5", "5"),
    (r"\boxed{\fbox{7}}", "7", "7"),
    (r"\boxed{x = \boxed{3}}", "3", "3"),
    (r"\boxed{\mathbf{\boxed{12}}}", "12", "12"),
    (r"\boxed{\boxed{5}", "5", "5"),  # the outer box truncated: the complete inner one
    (r"\boxed{4}. Check: \boxed{\text{not } \boxed{5}}", "5", "5"),  # the last box by position
    (r"\boxed{\$\,\boxed{1{,}000}\,}", "1000", "1{,}000"),
    (r"$$\boxed{\dfrac{\sqrt{3}}{2}}$$", r"\frac{\sqrt3}{2}", r"\dfrac{\sqrt{3}}{2}"),
    (r"**\boxed{\left(\frac{1}{2}, 3\right)}**", "(1/2, 3)", r"\left(\frac{1}{2}, 3\right)"),
    (r"$\boxed{\text{\textbf{5}}}$", "5", r"\text{\textbf{5}}"),  # two formatting wrappers
    (r"\boxed{\mathbf{\text{5}}}", "5", r"\mathbf{\text{5}}"),
    (r"\boxed{\textbf{\textbf{\frac{1}{2}}}}", "0.5", r"\textbf{\textbf{\frac{1}{2}}}"),
    (r"\boxed{\text{ \mathrm{\mathbf{42}} }}", "42", r"\text{ \mathrm{\mathbf{42}} }"),
]


@pytest.fixture(scope="module")
def parser_only():
    with MathChecker(check_fn="anchorft.eval.answers:parsed_equal", string_shortcut=False, timeout_s=30) as c:
        yield c


@pytest.mark.parametrize("response,gold,answer", NESTED)
def test_nested_wrappers_are_read_and_graded(parser_only, response, gold, answer):
    assert last_boxed(response) == answer
    assert grade(gold, response, checker=parser_only) == (answer, True)


@pytest.mark.parametrize("response,gold,answer", NESTED)
def test_a_near_miss_in_the_same_wrappers_stays_wrong(parser_only, response, gold, answer):
    wrong = {"5": "6", "7": "1", "3": "4", "12": "21", "1000": "100", "0.5": "0.25", "42": "24"}
    miss = wrong.get(gold, r"\frac{\sqrt2}{2}" if "sqrt" in gold else "(1/2, 4)")
    assert grade(miss, response, checker=parser_only)[1] is False


def test_wrappers_are_only_peeled_when_they_wrap_the_whole_answer(parser_only):
    from anchorft.eval.answers import _one_wrapper

    assert _one_wrapper(r"\text{\textbf{5}}") == r"\textbf{5}"
    assert _one_wrapper(r"\text{ \mathrm{\mathbf{42}} }") == r"\mathbf{42}"
    assert _one_wrapper(r"\textbf{5}") == r"\textbf{5}"  # one wrapper: left to math-verify, as before
    for expr in (
        r"\text{\textbf{5}} + 1",
        r"\text{\textbf{5}}\text{6}",
        r"\text{a \textbf{5}}",
        r"\frac{\text{1}}{2}",
    ):
        assert _one_wrapper(expr) == expr  # a wrapper beside something else does not wrap the answer
    assert grade("5", r"\boxed{\text{\textbf{5}} + 1}", checker=parser_only)[1] is False


@pytest.mark.parametrize(
    ("gold", "answer", "right"),
    [
        (
            "12",
            r"\textbf{12}\text{ cm}",
            True,
        ),  # emphasis on the number, the unit beside it: neither reading parsed it
        (r"12\text{ cm}", r"\textbf{12}\text{ cm}", True),
        ("21", r"\textbf{12}\text{ cm}", False),
        ("3x", r"\mathbf{3}x", True),
        ("4x", r"\mathbf{3}x", False),
        ("2", r"\textbf{1}+\textbf{1}", True),
        ("3", r"\textbf{1}+\textbf{1}", False),
        (r"\frac{1}{2}", r"\textbf{\frac{1}{2}} \text{ units}", True),
        ("x", r"\textbf{x", False),  # unbalanced: left as it is, and wrong
    ],
)
def test_emphasis_on_part_of_an_answer_is_read_through(parser_only, gold, answer, right):
    assert grade(gold, rf"\boxed{{{answer}}}", checker=parser_only)[1] is right


def test_without_emphasis_keeps_text_and_unbalanced_braces():
    from anchorft.eval.answers import _without_emphasis

    assert _without_emphasis(r"\textbf{12}\text{ cm}") == r"12\text{ cm}"
    assert _without_emphasis(r"\mathbf{\textit{a}} + \boldsymbol{b}") == "a + b"
    assert _without_emphasis(r"\text{ cm}") == r"\text{ cm}"
    assert _without_emphasis(r"\textbf{x") == r"\textbf{x"
