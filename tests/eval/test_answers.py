"""Answer extraction and math-verify checking (with timeouts off the main thread)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import anchorft.eval.answers as answers_module
from anchorft.eval.answers import (
    MathChecker,
    extract_choice,
    grade,
    last_boxed,
    math_equal,
    parse_choices,
    parsed_equal,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\boxed{5}}", "5"),
        (r"\fbox{7} at the end", "7"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{\left\{ x > 0 \right.}", r"\left\{ x > 0 \right."),  # an escaped brace without its pair
        (r"\boxed{ \left( 3, \frac{\pi}{2} \right) }", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{3} and a truncated \boxed{\frac{1}{", "3"),
        (r"\boxed 5.", "5"),
        (r"so \boxed X.", "X"),  # only trailing dots and commas are stripped
        (r"\boxed{3} then \boxed", "3"),  # a command at the very end is no box
        (r"\boxed{3} then \boxed ", "3"),
        (r"\boxed{3}, not \boxed(4)", "3"),  # neither a brace nor a space after the command
        ("no box here", None),
        (r"\boxedx{3}", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


QUESTION = "Which?\n\nChoices:\nA. bank\nB. library\nC. department store\nD. mall\n\nPlease answer with a letter."
NUMERIC = "Which?\n\nChoices:\n1. separated\n2. joined together\n3. north\n\nPlease answer with a letter."


def test_parse_choices():
    assert parse_choices(QUESTION) == {"A": "bank", "B": "library", "C": "department store", "D": "mall"}
    assert list(parse_choices(NUMERIC)) == ["1", "2", "3"]
    assert parse_choices("What is 2 + 2?") == {}


@pytest.mark.parametrize(
    "response, expected",
    [
        (r"so \boxed{C}", "C"),
        (r"\boxed{\text{C}}", "C"),
        (r"\boxed{(b)}", "B"),
        (r"\boxed{C. department store}", "C"),
        (r"\boxed{department store}", "C"),
        ("C", "C"),
        ("(D)", "D"),
        ("Thinking... the answer is (B).", "B"),
        ("Answer: A", "A"),
        ("the answer is a bank", None),  # a lowercase word is not a label
        ("ANSWER IS C", "C"),
        (r"\boxed{A} no wait \boxed{D}", "D"),
        (r"\boxed{Z}", None),
        ("I do not know", None),
    ],
)
def test_extract_choice(response, expected):
    assert extract_choice(response, parse_choices(QUESTION)) == expected


def test_extract_choice_numeric_labels_accept_letters():
    ch = parse_choices(NUMERIC)
    assert extract_choice(r"\boxed{2}", ch) == "2"
    assert extract_choice(r"\boxed{B}", ch) == "2"  # the prompt asks for a letter
    assert extract_choice(r"\boxed{D}", ch) is None  # no 4th option


@pytest.mark.parametrize(
    "gold, answer, expected",
    [
        (r"\frac{1}{2}", "0.5", True),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})", True),
        ("27", "27.0", True),
        ("x^2+2x+1", "(x+1)^2", True),
        (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}", True),
        ("27", "28", False),
        (r"\frac{1}{2}", "", False),
    ],
)
def test_math_equal(gold, answer, expected):
    assert math_equal(gold, answer) is expected


# differently written answers that math-verify must parse as equal (gold first): no two strings are identical,
# so the string shortcut never decides and each case goes through the parser
EQUIVALENT = [
    (r"\frac12", "0.5"),
    (r"\frac{1}{2}", r"\frac12"),
    (r"\frac{1}{2}", r"\dfrac{1}{2}"),
    ("0.5", r"\dfrac12"),
    ("1.5", r"\frac{3}{2}"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt3}2"),
    (r"3\sqrt{2}", r"\sqrt{18}"),
    ("3", "x=3"),
    ("x=3", "3"),
    ("3", "x = 3"),
    ("(2, 5]", "(2,5]"),
    (r"[1, \infty)", r"[1,\infty)"),
    (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty,2)\cup(3,\infty)"),
    (r"\{1,2\}", r"\{2,1\}"),
    ("10", r"10\text{ cm}"),
    (r"10\text{ cm}", "10"),
    ("10", r"10 \text{ dollars}"),
    ("90", r"90^\circ"),
    ("5", r"\$5"),
    ("25", r"25\%"),
    ("10000", "10,000"),
    ("10000", "10{,}000"),
]
# near misses: one symbol, bound, sign or digit off
NEAR_MISS = [
    (r"\frac{1}{2}", r"\frac{1}{3}"),
    ("0.5", "0.51"),
    ("2", "2.0001"),
    ("x=3", "x=4"),
    ("3", "-3"),
    ("(2,5]", "[2,5]"),
    ("(2,5]", "(2,5)"),
    (r"[1,\infty)", r"(1,\infty)"),
    ("10", r"11\text{ cm}"),
    (r"\sqrt{2}", "1.414"),
    (r"\pi", "3.14159"),
]


@pytest.mark.parametrize("gold, answer", EQUIVALENT)
def test_parser_accepts_differently_written_equivalents(gold, answer):
    assert gold.strip() != answer.strip()
    assert parsed_equal(gold, answer) is True
    assert math_equal(gold, answer) is True


@pytest.mark.parametrize("gold, answer", NEAR_MISS)
def test_parser_rejects_near_misses(gold, answer):
    assert parsed_equal(gold, answer) is False
    assert math_equal(gold, answer) is False


def test_parser_alone_rejects_unparsed_answers_and_works_off_the_main_thread():
    assert parsed_equal("3", "$") is False and parsed_equal("3", "}") is False  # nothing parsed: wrong
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(parsed_equal(r"\frac12", "0.5")))
    t.start()
    t.join()
    assert out == [True]  # math-verify's signal timeouts are off (they fail off the main thread)


def test_string_shortcut_decides_identical_strings_only(monkeypatch):
    """math_equal: identical (stripped) strings are equal without parsing; anything else goes to math-verify."""
    import anchorft.eval.answers as answers

    calls = []
    monkeypatch.setattr(answers, "parsed_equal", lambda g, a: calls.append((g, a)) or False)
    assert answers.math_equal(" 27 ", "27") is True and calls == []
    assert answers.math_equal("27", "27.0") is False and calls == [("27", "27.0")]
    assert answers.math_equal("27", " ") is False  # an empty answer is never equal


def test_parse_only_checker_has_no_shortcut(tmp_path, monkeypatch):
    """MathChecker(string_shortcut=False) sends identical strings to its check function too."""
    (tmp_path / "anchorft_mv_never.py").write_text("def never(gold, answer):\n    return False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with MathChecker(check_fn="anchorft_mv_never:never", string_shortcut=False) as strict:
        assert strict.check("27", "27") is False
    with MathChecker(check_fn="anchorft_mv_never:never") as default:
        assert default.check("27", "27") is True and default._proc is None  # decided without a worker


def test_checker_off_the_main_thread_matches_direct_calls(checker):
    pairs = [(r"\frac{1}{2}", "0.5"), ("27", "28"), ("x^2+2x+1", "(x+1)^2"), ("3", r"\sqrt{9}"), ("1", "2")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(lambda p: checker.check(*p), pairs))
    assert checker.n_timeouts == 0
    assert got == [math_equal(*p) for p in pairs] == [True, False, True, True, False]


def test_math_verify_signal_timeout_fails_off_main_thread_but_checker_works(checker):
    """math-verify's default (signal.alarm) timeouts cannot run in a thread; MathChecker can."""
    from math_verify import parse

    errors: list[BaseException] = []

    def default_parse():
        try:
            parse(r"\boxed{1}", parsing_timeout=5, raise_on_error=True)
        except BaseException as e:  # ValueError: signal only works in main thread
            errors.append(e)

    t = threading.Thread(target=default_parse)
    t.start()
    t.join()
    assert errors, "math-verify's signal timeout unexpectedly worked off the main thread"
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(checker.check("1", "1.0")))
    t.start()
    t.join()
    assert out == [True]


SLOW_MODULE = """
import time


def slow_equal(gold, answer):  # sleeps `gold` seconds, then says True
    time.sleep(float(gold))
    return True
"""


def test_checker_timeout_kills_and_recovers_off_main_thread(tmp_path, monkeypatch):
    (tmp_path / "anchorft_mv_slow.py").write_text(SLOW_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))  # the worker process inherits sys.path
    checker = MathChecker(timeout_s=0.5, check_fn="anchorft_mv_slow:slow_equal")
    out: list[bool] = []

    def run():
        out.append(checker.check("30", "a"))  # sleeps 30 s, then says True: False means it timed out
        out.append(checker.check("0", "b"))  # a fresh worker answers
        out.append(checker.check("30", "c"))  # a second timeout

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=180)
    checker.close()
    assert not t.is_alive()
    assert out == [False, True, False]  # no wall-clock assertion: the machine may be loaded
    assert checker.n_timeouts == 2
    assert checker._cache == {("0", "b"): True}  # a timed-out check is not remembered as wrong


def test_grade(checker):
    assert grade("27", r"so \boxed{27}", checker=checker) == ("27", True)
    assert grade("27", "27 without a box") == (None, False)
    assert grade("C", r"\boxed{C}", parse_choices(QUESTION)) == ("C", True)
    assert grade("B", r"\boxed{C}", parse_choices(QUESTION)) == ("C", False)


def test_grade_asks_the_given_checker_else_the_default_one(monkeypatch):
    class Recorder:
        def __init__(self):
            self.calls = []

        def check(self, gold, answer):
            self.calls.append((gold, answer))
            return True

    given, default = Recorder(), Recorder()
    monkeypatch.setattr(answers_module, "default_checker", lambda: default)
    assert grade("27", r"\boxed{28}", checker=given) == ("28", True)
    assert given.calls == [("27", "28")] and default.calls == []
    assert grade(27, r"\boxed{28}") == ("28", True)
    assert default.calls == [("27", "28")]


def test_parse_choices_runs_past_nine_numeric_options():
    question = "Pick one.\nChoices:\n" + "".join(f"{i}. option {i}\n" for i in range(1, 12))
    assert list(parse_choices(question)) == [str(i) for i in range(1, 12)]  # 9 is followed by 10, not ":"


def test_extract_choice_edge_cases():
    ch = parse_choices(QUESTION)  # A bank, B library, C department store, D mall
    assert extract_choice(r"\boxed{Department store.}", ch) == "C"  # an option's text: case and final period
    assert extract_choice(r"\boxed{department   store}", ch) == "C"  # ... and runs of spaces
    assert extract_choice(r"\boxed{$C$}", ch) == "C"  # a label in math mode
    assert extract_choice(r"\boxed{XC}", ch) is None  # two letters are not a label
    assert extract_choice("(C).", ch) == "C"  # a bare label of four characters
    assert extract_choice("Mall.", ch) is None and extract_choice("department store", ch) is None  # unboxed text
    assert extract_choice(r"\boxed{MA}", {"A": "MAX", "B": "MIN"}) is None  # not an option's text
    numeric = {"1": "one", "2": "two", "3": "three"}
    assert extract_choice(r"\boxed{none of these}", numeric) is None  # no label, no letter to map
    with pytest.raises(ValueError, match=r"^choices is empty: not a multiple-choice item$"):
        extract_choice("C", {})


def test_parser_has_no_signal_timeout_off_the_main_thread():
    """Parsed in the thread (the parse cache emptied first): a signal timeout would fail there."""
    import anchorft.eval.answers as answers

    answers._parse_boxed.cache_clear()  # a parse cached by an earlier test would hide the thread's
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(parsed_equal(r"\frac{7}{13}", r"\frac{14}{26}")))
    t.start()
    t.join()
    assert out == [True]


def test_checker_refuses_bad_settings_and_empty_answers():
    with pytest.raises(ValueError, match="timeout_s must be > 0, got 0"):
        MathChecker(timeout_s=0)
    with pytest.raises(ValueError, match="check_fn must be 'module:function', got 'nocolon'"):
        MathChecker(check_fn="nocolon")
    checker = MathChecker()
    assert checker.check("5", "") is False and checker.check("5", "  ") is False and checker.check("5", None) is False
    assert checker._proc is None  # decided without a worker
    with MathChecker(check_fn="anchorft_no_such_module:f") as broken:
        with pytest.raises(
            RuntimeError, match=r"^the math-verify worker process did not start \(is anchorft importable\?\)$"
        ):
            broken.check("1", "2")


def test_killing_the_worker_closes_both_pipes_even_when_one_is_broken():
    closed = []

    class Pipe:
        def __init__(self, name, broken):
            self.name, self.broken = name, broken

        def close(self):
            closed.append(self.name)
            if self.broken:  # flushing to a killed worker
                raise BrokenPipeError(32, "Broken pipe")

    class Proc:
        stdin, stdout = Pipe("stdin", True), Pipe("stdout", False)

        def kill(self):
            closed.append("kill")

        def wait(self, timeout=None):
            return -9

    checker = MathChecker()
    checker._proc = Proc()
    checker._kill()
    assert closed == ["kill", "stdin", "stdout"] and checker._proc is None and checker._lines is None


def test_checker_remembers_answered_pairs(checker):
    assert checker.check(r"\frac{3}{7}", r"\frac{6}{14}") is True
    assert checker._cache[(r"\frac{3}{7}", r"\frac{6}{14}")] is True


def test_parse_choices_spans_lines_and_reads_the_last_choices_block():
    question = "Choices:\nA. first\n\ncontinued\nB. last\nline\n\nAnswer with the letter."
    assert parse_choices(question) == {"A": "first\n\ncontinued", "B": "last\nline"}  # "Choices:" at 0
    example = "For example:\nChoices:\nA. cat\nB. dog\n\nNow the question.\nChoices:\nA. red\nB. blue\n"
    assert parse_choices(example) == {"A": "red", "B": "blue"}  # the last block, not the example's


def test_default_checker_is_made_once(monkeypatch):
    import anchorft.eval.answers as answers

    monkeypatch.setattr(answers, "_DEFAULT", None)
    checker = answers.default_checker()
    try:
        assert isinstance(checker, MathChecker) and answers.default_checker() is checker
    finally:
        checker.close()
