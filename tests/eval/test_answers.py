"""Answer extraction and math-verify checking (with timeouts off the main thread)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from anchorft.eval.answers import MathChecker, extract_choice, grade, last_boxed, math_equal, parse_choices


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\boxed{5}}", "5"),
        (r"\fbox{7} at the end", "7"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{ \left( 3, \frac{\pi}{2} \right) }", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{3} and a truncated \boxed{\frac{1}{", "3"),
        (r"\boxed 5.", "5"),
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
    out: list[tuple[bool, float]] = []

    def run():
        t0 = time.perf_counter()
        out.append((checker.check("30", "a"), time.perf_counter() - t0))  # sleeps 30 s: must time out
        out.append((checker.check("0", "b"), 0.0))  # a fresh worker answers

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=120)
    checker.close()
    assert not t.is_alive()
    (timed_out, elapsed), (fresh, _) = out
    assert timed_out is False and elapsed < 10
    assert fresh is True
    assert checker.n_timeouts == 1


def test_grade(checker):
    assert grade("27", r"so \boxed{27}", checker=checker) == ("27", True)
    assert grade("27", "27 without a box") == (None, False)
    assert grade("C", r"\boxed{C}", parse_choices(QUESTION)) == ("C", True)
    assert grade("B", r"\boxed{C}", parse_choices(QUESTION)) == ("C", False)
