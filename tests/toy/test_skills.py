"""Skills: generators give correct answers (checked independently), checkers accept them and reject near misses,
and train / eval splits are disjoint."""

from __future__ import annotations

import re

import numpy as np
import pytest

from anchorft.eval.answers import last_boxed
from anchorft.toy import skills as sk


def _question(item: sk.Item) -> str:
    assert item.prompt.startswith("Q:") and item.prompt.endswith("\nA:")
    return item.prompt[2:-3]


def _independent_answer(item: sk.Item) -> str:
    """Recompute each answer from the question text alone, without the generator's code."""
    q = _question(item)
    if item.skill == "reverse":
        return "".join(reversed(q.split()[1]))
    if item.skill == "sort":
        return "".join(sorted(q.split()[1]))
    if item.skill == "next":
        return "".join(chr((ord(c) - 97 + 1) % 26 + 97) for c in q.split()[1])
    if item.skill == "count":
        _, c, _, w = q.split()
        return str(sum(1 for x in w if x == c))
    if item.skill == "boolean":
        expr = q.split()[1].replace("~", " not ").replace("&", " and ").replace("|", " or ")
        expr = expr.replace("T", " True ").replace("F", " False ")
        return "T" if eval(expr) else "F"  # Python's own precedence: an independent evaluator
    if item.skill == "recall":
        kb = sk.knowledge_base()
        (name,) = [w for w in re.findall(r"\b[a-z]{4}\b", q) if w in kb]
        return kb[name]
    if item.skill.startswith("math"):
        m = re.fullmatch(r"(\d+)([+-])(\d+)=\?", q)
        if m:
            a, op, b = int(m[1]), m[2], int(m[3])
        else:
            m = re.fullmatch(r"\w+ had (\d+) (\w+), (got|lost) (\d+)\. \2\?", q)
            assert m, q
            a, op, b = int(m[1]), "+" if m[3] == "got" else "-", int(m[4])
        return f"\\boxed{{{a + b if op == '+' else a - b}}}"
    raise AssertionError(item.skill)


def _near_miss(item: sk.Item) -> list[str]:
    a = item.answer
    if item.skill.startswith("math"):
        v = int(last_boxed(a))
        return [f"\\boxed{{{v + 1}}}", f"\\boxed{{{v - 1}}}", str(v), f"\\boxed{{{v}0}}"]
    if item.skill == "boolean":
        return ["F" if a == "T" else "T", a + a]
    if item.skill == "count":
        return [str(int(a) + 1), a + "0"]
    # strings: change one character, drop one, add one
    changed = ("b" if a[0] != "b" else "c") + a[1:]
    return [changed, a[:-1], a + "a"]


@pytest.mark.parametrize("skill", sorted(sk.SKILLS))
def test_generator_and_checker(skill):
    rng = np.random.default_rng(0)
    s = sk.SKILLS[skill]
    items = sk.sample_items(skill, 60, "train", rng) + sk.sample_items(skill, 20, "eval", rng)
    assert len(items) == 80
    for it in items:
        assert it.answer == _independent_answer(it), it
        assert s.check(it, it.answer)
        assert s.check(it, " " + it.answer + " ")  # surrounding whitespace is not an error
        for wrong in _near_miss(it):
            if wrong != it.answer:
                assert not s.check(it, wrong), (it, wrong)


def test_boxed_checker_takes_last_box_and_needs_one():
    it = sk.Item("math_hard", "1+2", sk.format_prompt("1+2=?"), "\\boxed{3}")
    check = sk.SKILLS["math_hard"].check
    assert check(it, "\\boxed{4} no, \\boxed{3}")
    assert not check(it, "\\boxed{3} no, \\boxed{4}")
    assert not check(it, "3")
    assert not check(it, "")


@pytest.mark.parametrize("skill", sorted(sk.SKILLS))
def test_splits_disjoint_and_deterministic(skill):
    train = sk.sample_items(skill, 400, "train", np.random.default_rng(1))
    ev = sk.sample_items(skill, 200, "eval", np.random.default_rng(2), unique=True)
    assert ev, skill
    train_keys, eval_keys = {i.key for i in train}, {i.key for i in ev}
    assert not train_keys & eval_keys
    assert all(sk.split_of(skill, k) == "train" for k in train_keys)
    assert len(eval_keys) == len(ev)  # unique
    # the same generator seed gives the same items
    again = sk.sample_items(skill, 400, "train", np.random.default_rng(1))
    assert [i.key for i in again] == [i.key for i in train]
    # prompts of eval items never appear among training prompts
    assert not {i.prompt for i in train} & {i.prompt for i in ev}


def test_eval_fraction_of_split():
    keys = [str(i) for i in range(4000)]
    share = np.mean([sk.split_of("x", k) == "eval" for k in keys])
    assert abs(share - sk.EVAL_FRACTION) < 0.03


def test_knowledge_base_fixed_and_statements():
    kb = sk.knowledge_base()
    assert kb == sk.knowledge_base() and len(kb) == sk.KB_SIZE
    assert all(len(n) == 4 and c in sk.COLOURS for n, c in kb.items())
    assert len(sk.kb_statements()) == len(kb)


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="skill"):
        sk.sample_items("nope", 1, "train", rng)
    with pytest.raises(ValueError, match="split"):
        sk.sample_items("reverse", 1, "test", rng)
