"""Property tests of the answer reader (eval/answers.py): generated wrappings of an answer grade as the bare answer,
generated near misses in the same wrappings do not.

Each answer form the suites meet is written bare (`\\boxed{C}`, `\\boxed{0.75}`), then wrapped: formatting commands
nested to depth 4 in any order (\\text, \\textbf, \\mathrm, ...), boxes in boxes, `$...$` and display math,
parentheses and brackets around labels, spaces, trailing punctuation, an answer phrase ("the answer is (C)"), text
before and after, an earlier answer taken back. A wrapping grades as the bare answer does (right); the same
wrapping of another label, of a label inside a longer word, or of a number with another value grades wrong.

The rules where a form is ambiguous (docs/eval.md, Grading):
- the last complete box decides: an earlier box is an answer taken back; when the last box names no label, an
  earlier one is not read (the answer phrases are);
- inside a box a letter label may be lower case (`\\boxed{c}`); in an answer phrase only a capital is a label
  ("the answer is a bank" names no option), and in a phrase the last one decides;
- a label is a whole word: `Cat`, `C1`, `123` or `12.5` name no label (a number label followed by a decimal point
  and a digit is a number);
- numbered options (1., 2., ...) answered with a letter map A -> 1, B -> 2, ...;
- a math answer is read from its box only (a phrase without a box is no answer); a trailing `.`, `,` or `;` inside
  the box is a sentence's, not the answer's; formatting commands around the whole math answer are read through.

Math forms are checked in this process with `parsed_equal` (no string shortcut: math-verify decides every case),
through `grade` with an in-process checker; examples are fixed (`derandomize`) so a CI run is repeatable."""

from __future__ import annotations

import string
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from anchorft.eval.answers import grade, parsed_equal

LABEL_EXAMPLES = 150  # the reader alone: microseconds an example
MATH_EXAMPLES = 40  # math-verify parses each example: milliseconds
LABELS = settings(max_examples=LABEL_EXAMPLES, derandomize=True, deadline=None, database=None)
MATH = settings(max_examples=MATH_EXAMPLES, derandomize=True, deadline=None, database=None)

FORMATTING = ("text", "textbf", "textit", "textrm", "texttt", "mathbf", "mathrm", "mathit", "boldsymbol")
BOXES = (r"\boxed{@}", r"\fbox{@}", r"\boxed {@}", r"\boxed{ @ }")
DISPLAY = ("@", "$@$", "$$@$$", r"\[@\]", r"\(@\)", "**@**")
SUFFIX = ("", ".", " .", "\n", "\n\nI hope this is right.", "\n" + r"\boxed{\text{")  # the last: a truncated box
AROUND_LABEL = ("(@)", "[@]", "@)", "**@**", "$@$", " @ ", "@.", "@,", "@;", "@:", "@!")
AROUND_NUMBER = (" @ ", "@.", "@,", "@;")
PHRASES = (
    "the answer is @",
    "The answer is: @",
    "Answer: @",
    "ANSWER: @",
    "The correct answer is @.",
    "I choose option @",
    "The best choice is @",
    "So the final answer is @ because it fits.",
)
REASONING = ("", "Let me look at each one.\n\n", "Thinking it over, ")


def _wrap(inner: str, templates) -> str:
    for t in templates:
        inner = t.replace("@", inner)
    return inner


def _formatting():
    """One formatting command as written: \\textbf{@}, \\textbf {@}, \\textbf{ @ }."""
    return st.builds(
        lambda cmd, t: t.replace("CMD", cmd),
        st.sampled_from(FORMATTING),
        st.sampled_from((r"\CMD{@}", r"\CMD {@}", r"\CMD{ @ }")),
    )


@st.composite
def _inner(draw, around) -> list[str]:
    """Up to 4 formatting commands and up to 2 other wrappers (`around`), in any order, innermost first."""
    layers = draw(st.lists(_formatting(), max_size=4)) + draw(st.lists(st.sampled_from(around), max_size=2))
    return list(draw(st.permutations(layers)))


class _Response:
    """A response with two blanks, `<ANSWER>` and `<TAKEN_BACK>` (an earlier answer taken back): called with both,
    the response; its repr (in a failing example) the template."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __call__(self, answer: str, taken_back: str) -> str:
        return self.template.replace("<ANSWER>", answer).replace("<TAKEN_BACK>", taken_back)

    def __repr__(self) -> str:
        return f"_Response({self.template!r})"


@st.composite
def _boxed_response(draw, around):
    """A response: the answer in its wrappers, in a box (maybe in boxes and formatting), in display math, between
    text; maybe after an earlier box taken back."""
    inner = draw(_inner(around))
    box = draw(st.sampled_from(BOXES))
    outer = draw(st.lists(st.one_of(st.sampled_from(BOXES), _formatting()), max_size=3))
    display = draw(st.sampled_from(DISPLAY))
    reasoning = draw(st.sampled_from(REASONING + ("The answer is ", "Final answer: ", "**Answer:** ")))
    suffix = draw(st.sampled_from(SUFFIX))
    before = r"At first I got \boxed{<TAKEN_BACK>}, but that is wrong. " if draw(st.booleans()) else ""
    return _Response(before + reasoning + _wrap(_wrap(_wrap("<ANSWER>", inner), [box]), [*outer, display]) + suffix)


@st.composite
def _phrase_response(draw):
    """(a response naming the label in an answer phrase, maybe after an earlier phrase taken back; whether it takes
    one back)."""
    inner = draw(_inner(("(@)", "[@]", "**@**", "$@$", " @", "@.", "@,", "@!")))
    phrase = draw(st.sampled_from(PHRASES))
    reasoning = draw(st.sampled_from(REASONING))
    suffix = draw(st.sampled_from(("", ".", "\n\nDone.")))
    take_back = draw(st.booleans())
    before = "At first I thought the answer is (<TAKEN_BACK>), but no. " if take_back else ""
    return _Response(before + reasoning + phrase.replace("@", _wrap("<ANSWER>", inner)) + suffix), take_back


def _letter_choices(n: int) -> dict[str, str]:
    return {chr(ord("A") + i): f"the option written {i} here" for i in range(n)}


def _number_choices(n: int) -> dict[str, str]:
    return {str(i): f"the option written {i} here" for i in range(1, n + 1)}


@st.composite
def _mc_item(draw, numbered: bool):
    """(choices, gold, another label): letters A-Z, or numbers 1-99."""
    n = draw(st.integers(2, 99 if numbered else 26))
    choices = _number_choices(n) if numbered else _letter_choices(n)
    gold, other = draw(st.lists(st.sampled_from(list(choices)), min_size=2, max_size=2, unique=True))
    return choices, gold, other


def _bare(gold: str, choices: dict[str, str]) -> tuple[str | None, bool]:
    bare = grade(gold, rf"\boxed{{{gold}}}", choices)
    assert bare == (gold, True)  # the bare answer is right: what every wrapping must match
    return bare


# ---------------------------------------------------------------- multiple choice: labels in boxes


@LABELS
@given(item=_mc_item(numbered=False), response=_boxed_response(AROUND_LABEL), lower=st.booleans())
@example(
    item=(_letter_choices(4), "C", "B"),
    response=_Response(r"\boxed{\text{\textbf{\mathrm{\mathbf{<ANSWER>}}}}}"),
    lower=False,
)  # depth 4 exactly
def test_a_letter_label_in_any_wrapping_grades_as_the_bare_label(item, response, lower):
    """Breaks when: the wrapper unwrapping in `_unwrap` stops short of depth 4 (or is dropped), `_LABEL_STRIP`
    loses a character, or `last_boxed` takes the first box instead of the last."""
    choices, gold, other = item
    label = gold.lower() if lower else gold
    assert grade(gold, response(label, other), choices) == _bare(gold, choices)


@LABELS
@given(item=_mc_item(numbered=True), response=_boxed_response(AROUND_LABEL))
def test_a_number_label_in_any_wrapping_grades_as_the_bare_label(item, response):
    choices, gold, other = item
    assert grade(gold, response(gold, other), choices) == _bare(gold, choices)


@LABELS
@given(n=st.integers(2, 26), data=st.data(), response=_boxed_response(AROUND_LABEL))
def test_a_letter_answers_numbered_options_by_its_place(n, data, response):
    """Numbered options answered with a letter (the prompt asks for "the option letter"): A -> 1, B -> 2, ...;
    a letter past the last option names none."""
    choices = _number_choices(n)
    i = data.draw(st.integers(1, n))
    letter = chr(ord("A") + i - 1)
    assert grade(str(i), response(letter, "Z"), choices) == _bare(str(i), choices)
    past = chr(ord("A") + n)  # the letter after the last option: no option, even with numbers up to 26
    assert grade(str(i), response(past, letter), choices) == (None, False)


@LABELS
@given(item=_mc_item(numbered=False), response=_boxed_response(AROUND_LABEL))
def test_another_letter_in_the_same_wrapping_grades_as_that_letter(item, response):
    choices, gold, other = item
    assert grade(gold, response(other, gold), choices) == (other, False)


@LABELS
@given(item=_mc_item(numbered=True), response=_boxed_response(AROUND_LABEL))
def test_another_number_in_the_same_wrapping_grades_as_that_number(item, response):
    choices, gold, other = item
    assert grade(gold, response(other, gold), choices) == (other, False)


@st.composite
def _longer_word(draw, label: str) -> str:
    """`label` inside a longer word: letters or digits before or after it, or a decimal (number labels)."""
    if label.isdigit() and draw(st.booleans()):
        return label + "." + draw(st.text(string.digits, min_size=1, max_size=2))  # 12.5: a number, not label 12
    alphabet = string.ascii_letters + string.digits
    before = draw(st.text(alphabet, max_size=2))
    after = draw(st.text(alphabet, min_size=0 if before else 1, max_size=2))
    word = before + label + after
    if label.isdigit() and word.isdigit() and len(word) <= 2:  # 1 -> 12: another label, not a longer word
        word += "0"
    return word


@LABELS
@given(numbered=st.booleans(), data=st.data(), response=_boxed_response(AROUND_LABEL))
def test_a_label_inside_a_longer_word_names_no_label(numbered, data, response):
    """`\\boxed{Cat}`, `\\boxed{C1}`, `\\boxed{123}`, `\\boxed{12.5}`: no label, and an earlier box is not read."""
    choices, gold, other = data.draw(_mc_item(numbered))
    word = data.draw(_longer_word(gold))
    assert grade(gold, response(word, other), choices) == (None, False)


# ---------------------------------------------------------------- multiple choice: labels in answer phrases


@LABELS
@given(numbered=st.booleans(), data=st.data(), phrase=_phrase_response())
def test_a_label_in_an_answer_phrase_grades_as_the_bare_label(numbered, data, phrase):
    """Answer phrases ("the answer is (C)", "Answer: **[C]**", "option $\\textbf{C}$"): the last one's label."""
    response, _ = phrase
    choices, gold, other = data.draw(_mc_item(numbered))
    assert grade(gold, response(gold, other), choices) == _bare(gold, choices)


@LABELS
@given(numbered=st.booleans(), data=st.data(), phrase=_phrase_response())
def test_a_phrase_near_miss_grades_wrong(numbered, data, phrase):
    """Another label names that label; a longer word, a decimal, or (letters) a lower-case letter names none: an
    earlier phrase taken back then decides, as the last phrase that names a label."""
    response, take_back = phrase
    choices, gold, other = data.draw(_mc_item(numbered))
    assert grade(gold, response(other, other), choices) == (other, False)
    misses = [data.draw(_longer_word(gold))] + ([] if numbered else [gold.lower()])
    for miss in misses:
        assert grade(gold, response(miss, other), choices) == ((other, False) if take_back else (None, False)), miss


@LABELS
@given(
    numbered=st.booleans(),
    data=st.data(),
    around=st.lists(st.sampled_from(("(@)", "[@]", "**@**", "$@$", " @ ", "@.")), max_size=3),
    formatting=st.lists(_formatting(), max_size=2),
)
def test_a_response_that_is_only_a_wrapped_label_grades_as_the_bare_label(numbered, data, around, formatting):
    """No box, no phrase: "C", "(C).", "**C**", "$\\textbf{C}$" are the label."""
    choices, gold, other = data.draw(_mc_item(numbered))
    layers = data.draw(st.permutations(around + formatting))
    assert grade(gold, _wrap(gold, layers), choices) == _bare(gold, choices)
    assert grade(gold, _wrap(other, layers), choices) == (other, False)


def test_a_long_run_of_spaces_after_answer_is_read_in_linear_time():
    """The answer phrase's pattern has one repetition over spaces and wrappers: 20,000 spaces after "Answer:" with
    no label after them take milliseconds (nested repetitions took a minute at 200). In a child process with a
    timeout: a regular expression holds the interpreter until it ends."""
    import subprocess
    import sys

    code = (
        "from anchorft.eval.answers import extract_choice as x; c = dict.fromkeys('ABCD', 'text')\n"
        "assert x('Answer:' + ' ' * 20_000 + 'unsure', c) is None\n"
        "assert x('the answer is' + '\\n' * 20_000 + ' (B)', c) == 'B'\n"
        "assert x('option' + ' \\t' * 10_000 + 'b', c) is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# ---------------------------------------------------------------- math: numbers in boxes


class _InProcess:
    """grade's checker in this process: `parsed_equal`, no string shortcut (math-verify decides every case)."""

    def check(self, gold: str, answer: str | None) -> bool:
        return answer is not None and bool(answer.strip()) and parsed_equal(gold, answer)


CHECK = _InProcess()


def _int_misses(n: int) -> list[int]:
    return sorted({n + 1, n - 1, -n, 10 * n, int(str(abs(n)) + "1") * (-1 if n < 0 else 1)} - {n})


@st.composite
def _integer(draw):
    """(gold, the answer as written, a number with another value)."""
    n = draw(st.integers(-9999, 9999))
    return str(n), str(n), str(draw(st.sampled_from(_int_misses(n))))


@st.composite
def _decimal(draw):
    sign = draw(st.sampled_from(("", "-")))
    whole = draw(st.integers(0, 99))
    digits = draw(st.text("0123456789", min_size=0, max_size=2)) + draw(st.sampled_from("123456789"))
    gold = f"{sign}{whole}.{digits}"
    answer = draw(st.sampled_from((gold, gold + "0")))  # 2.5 and 2.50: one value
    last = int(digits[-1])
    misses = [
        f"{sign}{whole}.{digits[:-1]}{last % 9 + 1}",  # the last digit changed
        f"{sign}{whole}{digits[0]}.{digits[1:] or '0'}",  # the point moved
        f"{'' if sign else '-'}{whole}.{digits}",  # the sign flipped
        f"{sign}{whole}{digits}",  # the point dropped
    ]
    return gold, answer, draw(st.sampled_from(misses))


def _tex(value: Fraction) -> str:
    sign = "-" if value < 0 else ""
    if value.denominator == 1:
        return f"{sign}{abs(value.numerator)}"
    return sign + rf"\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


@st.composite
def _fraction(draw):
    value = draw(st.builds(Fraction, st.integers(-99, 99), st.integers(2, 99)).filter(lambda f: f.denominator > 1))
    p, q, sign = abs(value.numerator), value.denominator, "-" if value < 0 else ""
    forms = [rf"\frac{{{p}}}{{{q}}}", rf"\dfrac{{{p}}}{{{q}}}", rf"\tfrac{{{p}}}{{{q}}}", f"{p}/{q}"]
    answers = [sign + f for f in forms] + ([rf"\frac{{-{p}}}{{{q}}}"] if sign else [])
    unit = -1 if value < 0 else 1
    others = [unit * Fraction(p + 1, q), unit * Fraction(p, q + 1), unit * Fraction(q, p), -value]
    miss = draw(st.sampled_from([o for o in others if o != value]))
    return _tex(value), draw(st.sampled_from(answers)), _tex(miss)


UNITS = (r"@\text{ cm}", r"@ \text{ meters}", r"@\,\text{kg}", r"@^\circ", r"@^{\circ}", r"\$@", r"@\%")


@st.composite
def _with_unit(draw):
    n = draw(st.integers(0, 9999))
    unit = draw(st.sampled_from(UNITS))
    miss = draw(st.sampled_from(sorted({n + 1, 10 * n + 1, n - 1} - {n, -1})))
    return str(n), unit.replace("@", str(n)), unit.replace("@", str(miss))


FORMS = {"integer": _integer, "decimal": _decimal, "fraction": _fraction, "unit": _with_unit}


@pytest.mark.parametrize("form", list(FORMS))
@MATH
@given(data=st.data(), response=_boxed_response(AROUND_NUMBER))
def test_a_number_in_any_wrapping_grades_as_the_bare_number(form, data, response):
    """Breaks when: `parsed_equal` stops dropping a trailing `.`/`,`/`;` (`_TRAILING`) or stops reading through a
    formatting wrapper (`\\textbf{0.75}`, `\\textbf{12\\text{ cm}}`), or `last_boxed` takes the first box."""
    gold, answer, miss = data.draw(FORMS[form]())
    assert grade(gold, rf"\boxed{{{answer}}}", checker=CHECK) == (answer, True)  # the bare answer is right
    assert grade(gold, response(answer, miss), checker=CHECK)[1] is True


@pytest.mark.parametrize("form", list(FORMS))
@MATH
@given(data=st.data(), response=_boxed_response(AROUND_NUMBER))
def test_a_number_with_another_value_in_the_same_wrapping_grades_wrong(form, data, response):
    """Another value (a digit changed, added or dropped, the point moved, the sign flipped) is wrong in every
    wrapping, even after the right answer in an earlier box taken back."""
    gold, answer, miss = data.draw(FORMS[form]())
    assert grade(gold, rf"\boxed{{{miss}}}", checker=CHECK) == (miss, False)
    extracted, correct = grade(gold, response(miss, answer), checker=CHECK)
    assert correct is False and miss in extracted  # the near miss, read (not some other text) and judged wrong


@MATH
@given(data=st.data(), phrase=st.sampled_from(PHRASES))
def test_a_math_answer_outside_a_box_is_no_answer(data, phrase):
    gold, answer, _ = data.draw(_integer())
    assert grade(gold, phrase.replace("@", answer), checker=CHECK) == (None, False)


def test_a_decimal_whose_head_is_a_number_label_names_no_label():
    choices = _number_choices(12)
    for response in (r"\boxed{1.5}", r"\boxed{\text{1.5}}", "1.5", "The answer is 1.5", "Answer: 12.5."):
        assert grade("1", response, choices) == (None, False), response
    assert grade("1", "The answer is 1.", choices) == ("1", True)  # a sentence's point after a label
