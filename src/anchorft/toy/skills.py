"""Skills of the embedded testbed: generators of (prompt, answer) items and exact checkers.

Every skill draws items from a numpy Generator passed by the caller. Each item has a `key` (what
makes it that item, e.g. the letters to reverse); a hash of (skill, key) decides once and for all
whether the item belongs to the training or the evaluation split, so the two splits are disjoint
by construction whatever the seeds. Prompts are rendered as ``Q:<question>\\nA:`` and answers
follow directly. The tokenizer (`tokenizer.py`) spells every random string letter by letter and
reads the templates' own words (`WORDS`) and format markers (`FORMAT_TOKENS`) as one token each, so
random strings are drawn never to be one of those words.

In-domain (ID) skills are math with the answer in ``\\boxed{}``: ``math_easy`` (pretraining level,
solved in part) and ``math_hard`` (the fine-tuning distribution, the analogue of OpenR1-Math).
Out-of-domain (OOD) skills have nothing to do with arithmetic: reversal, sorting letters, shifting
each letter to the next one, counting a letter, boolean logic, and recall from a fixed synthetic
knowledge base whose facts are stated in the pretraining corpus.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from anchorft.eval.answers import last_boxed

__all__ = [
    "Item",
    "Skill",
    "SKILLS",
    "ID_SKILLS",
    "OOD_SKILLS",
    "format_prompt",
    "split_of",
    "sample_items",
    "knowledge_base",
    "kb_statements",
    "WORDS",
    "FORMAT_TOKENS",
]

LETTERS = string.ascii_lowercase
COLOURS = ("red", "blue", "green", "pink", "gray", "gold", "teal", "plum")
KB_SEED = 20260501  # the knowledge base is part of the testbed's "world": fixed, not a run seed
KB_SIZE = 120
EVAL_FRACTION = 0.25  # share of each skill's item space that is held out for evaluation
NAMES = ("ann", "bob", "cal", "dee", "eve", "fay", "gus", "hal", "ivy", "jon")
OBJECTS = ("pens", "cups", "figs", "nuts", "eggs", "hats", "keys", "toys")
RECALL_TEMPLATES = (
    "colour of {}?",
    "what colour is {}?",
    "{} has which colour?",
    "which colour is {}?",
    "tell me the colour of {}.",
    "{}: colour?",
    "and {} is what colour?",
    "name the colour of {}.",
    "{} is which colour?",
    "what is the colour of {}?",
    "colour for {}?",
    "say the colour of {}.",
)
# The templates' words and format markers: one token each (tokenizer.py), never drawn as a random string.
WORDS = tuple(
    sorted(
        {"reverse", "sort", "next", "count", "in", "eval", "had", "got", "lost", "is"}
        | {*NAMES, *OBJECTS, *COLOURS}
        | {w for t in RECALL_TEMPLATES for w in re.findall("[a-z]+", t)}
    )
)
_WORDS = frozenset(WORDS)
FORMAT_TOKENS = ("Q:", "\nA:", "\\boxed{")


@dataclass(frozen=True)
class Item:
    skill: str
    key: str  # identity of the item; decides its split
    prompt: str  # formatted prompt, ends with "A:"
    answer: str  # the exact target completion (without EOS)


def format_prompt(question: str) -> str:
    """The testbed's prompt format (also the tokenizer's chat template for one user turn)."""
    return f"Q:{question}\nA:"


def split_of(skill: str, key: str, eval_fraction: float = EVAL_FRACTION) -> str:
    """'eval' or 'train' from a SHA-256 hash of (skill, key): disjoint splits by construction."""
    h = int.from_bytes(hashlib.sha256(f"{skill}|{key}".encode()).digest()[:8], "big")
    return "eval" if h / 2.0**64 < eval_fraction else "train"


def _check_boxed(item: Item, response: str) -> bool:
    got, want = last_boxed(response), last_boxed(item.answer)
    return got is not None and got == want


def _check_exact(item: Item, response: str) -> bool:
    return response.strip() == item.answer


def _word(rng: np.random.Generator, lo: int, hi: int, alphabet: str = LETTERS, transform=None) -> str:
    """A random string of `lo`..`hi` letters that is not a template word (nor is `transform` of it): the
    tokenizer must spell it letter by letter for reversal, sorting, counting and next letter to be about letters."""
    while True:
        n = int(rng.integers(lo, hi + 1))
        w = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=n))
        if w not in _WORDS and (transform is None or transform(w) not in _WORDS):
            return w


# --- generators: rng -> (key, question, answer) -----------------------------------------------


def _reversed(w: str) -> str:
    return w[::-1]


def _sorted(w: str) -> str:
    return "".join(sorted(w))


def _shifted(w: str) -> str:
    return "".join(LETTERS[(LETTERS.index(c) + 1) % 26] for c in w)


def _gen_transform(verb: str, lo: int, hi: int, transform: Callable[[str], str]):
    """A letter skill's generator: "VERB w" for a random string w of `lo`..`hi` letters, answered by `transform(w)`."""

    def gen(rng):
        w = _word(rng, lo, hi, transform=transform)
        return w, f"{verb} {w}", transform(w)

    return gen


def _gen_count(rng):
    w = _word(rng, 3, 7, "abcd")
    c = "abcd"[int(rng.integers(0, 4))]
    return f"{c}|{w}", f"count {c} in {w}", str(w.count(c))


def _bool_eval(terms: list[tuple[bool, bool]], ops: list[str]) -> bool:
    """Independent evaluator: not > and > or (Python precedence), by explicit reduction."""
    values = [(not v) if neg else v for neg, v in terms]
    # fold the ands first, then or the groups
    groups, current = [], values[0]
    for op, v in zip(ops, values[1:]):
        if op == "&":
            current = current and v
        else:
            groups.append(current)
            current = v
    groups.append(current)
    return any(groups)


def _gen_bool(rng):
    # 2 to 4 terms (2,336 distinct expressions): with only the 256 three-term ones, a model memorised the 192 of
    # the training split (100 % on them) and reached 84-93 % on the held-out ones; more distinct expressions make
    # the rule, not the table, the thing learnt.
    n_terms = int(rng.choice([2, 3, 4], p=[0.2, 0.4, 0.4]))
    terms = [(bool(rng.integers(0, 2)), bool(rng.integers(0, 2))) for _ in range(n_terms)]
    ops = ["&" if rng.integers(0, 2) else "|" for _ in range(n_terms - 1)]
    text = ("~" if terms[0][0] else "") + ("T" if terms[0][1] else "F")
    for op, (neg, v) in zip(ops, terms[1:]):
        text += op + ("~" if neg else "") + ("T" if v else "F")
    return text, f"eval {text}", "T" if _bool_eval(terms, ops) else "F"


def knowledge_base() -> dict[str, str]:
    """The fixed synthetic knowledge base: KB_SIZE distinct 4-letter names -> a colour."""
    rng = np.random.default_rng(KB_SEED)
    kb: dict[str, str] = {}
    while len(kb) < KB_SIZE:
        name = _word(rng, 4, 4)
        if name not in kb:
            kb[name] = COLOURS[int(rng.integers(0, len(COLOURS)))]
    return kb


_KB = knowledge_base()
_KB_NAMES = tuple(_KB)


def kb_statements() -> list[str]:
    """The knowledge base as plain text documents (all facts, in the pretraining corpus)."""
    return [f"{name} is {colour}." for name, colour in _KB.items()]


def _gen_recall(rng):
    # The item key is (name, phrasing): evaluation asks about known facts in phrasings held out for that
    # name, so it tests recall of stored knowledge, not memorised question strings (with 12 phrasings a
    # name is asked in about 9 of them in training, which makes the fact, not the string, the thing learnt).
    # Facts stated only as text, never asked, stay at chance for a model this small: the knowledge-extraction gap.
    name = _KB_NAMES[int(rng.integers(0, len(_KB_NAMES)))]
    t = int(rng.integers(0, len(RECALL_TEMPLATES)))
    return f"{name}|{t}", RECALL_TEMPLATES[t].format(name), _KB[name]


def _gen_math_easy(rng):
    if rng.random() < 0.6:
        a, b = (int(x) for x in rng.integers(0, 100, size=2))
        if rng.random() < 0.5 or a < b:
            return f"{a}+{b}", f"{a}+{b}=?", f"\\boxed{{{a + b}}}"
        return f"{a}-{b}", f"{a}-{b}=?", f"\\boxed{{{a - b}}}"
    who, obj = NAMES[int(rng.integers(0, len(NAMES)))], OBJECTS[int(rng.integers(0, len(OBJECTS)))]
    a, b = (int(x) for x in rng.integers(1, 10, size=2))
    return f"w{who}{obj}{a}+{b}", f"{who} had {a} {obj}, got {b}. {obj}?", f"\\boxed{{{a + b}}}"


def _gen_math_hard(rng):
    u = rng.random()
    if u < 0.5:  # a 3-digit sum
        return _gen_math_add3(rng)
    who, obj = NAMES[int(rng.integers(0, len(NAMES)))], OBJECTS[int(rng.integers(0, len(OBJECTS)))]
    a, b = (int(x) for x in rng.integers(10, 100, size=2))
    if u < 0.75:
        return f"w{who}{obj}{a}+{b}", f"{who} had {a} {obj}, got {b}. {obj}?", f"\\boxed{{{a + b}}}"
    a, b = max(a, b), min(a, b)
    return f"w{who}{obj}{a}-{b}", f"{who} had {a} {obj}, lost {b}. {obj}?", f"\\boxed{{{a - b}}}"


def _gen_math_add3(rng):
    """3-digit addition only: the fine-tuning task of the testbed (pretraining sees 2-digit sums)."""
    a, b = (int(x) for x in rng.integers(100, 1000, size=2))
    return f"{a}+{b}", f"{a}+{b}=?", f"\\boxed{{{a + b}}}"


def _gen_math_word(rng):
    """The word problems of math_hard alone (2-digit operands): a narrower ID task."""
    while True:
        key, question, answer = _gen_math_hard(rng)
        if key.startswith("w"):
            return key, question, answer


@dataclass(frozen=True)
class Skill:
    name: str
    generate: Callable[[np.random.Generator], tuple[str, str, str]]
    checker: Callable[[Item, str], bool]

    def sample(self, rng: np.random.Generator) -> Item:
        key, question, answer = self.generate(rng)
        return Item(self.name, key, format_prompt(question), answer)

    def check(self, item: Item, response: str) -> bool:
        """Exact checker: True when `response` (the model's completion) answers `item`."""
        return bool(self.checker(item, response))


SKILLS: dict[str, Skill] = {
    "math_easy": Skill("math_easy", _gen_math_easy, _check_boxed),
    "math_hard": Skill("math_hard", _gen_math_hard, _check_boxed),
    "math_word": Skill("math_word", _gen_math_word, _check_boxed),
    "math_add3": Skill("math_add3", _gen_math_add3, _check_boxed),
    "reverse": Skill("reverse", _gen_transform("reverse", 3, 6, _reversed), _check_exact),
    "sort": Skill("sort", _gen_transform("sort", 3, 4, _sorted), _check_exact),
    "next": Skill("next", _gen_transform("next", 2, 5, _shifted), _check_exact),
    "count": Skill("count", _gen_count, _check_exact),
    "boolean": Skill("boolean", _gen_bool, _check_exact),
    "recall": Skill("recall", _gen_recall, _check_exact),
}
ID_SKILLS = ("math_add3", "math_hard", "math_word")  # fine-tuning / in-domain evaluation distributions
OOD_SKILLS = ("reverse", "sort", "next", "count", "boolean", "recall")


def sample_items(
    skill: str, n: int, split: str, rng: np.random.Generator, *, unique: bool = False, max_tries: int | None = None
) -> list[Item]:
    """`n` items of `skill` from `split` ('train' or 'eval') by rejection on the hash split.

    With `unique`, items have distinct keys (evaluation sets); fewer than `n` are returned when the
    split holds fewer distinct items than asked (e.g. the 64 evaluation expressions of `boolean`).
    """
    if skill not in SKILLS:
        raise ValueError(f"skill: unknown {skill!r}; choose from {sorted(SKILLS)}")
    if split not in ("train", "eval"):
        raise ValueError(f"split: must be 'train' or 'eval', got {split!r}")
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    s = SKILLS[skill]
    out: list[Item] = []
    seen: set[str] = set()
    tries, limit = 0, max_tries if max_tries is not None else 200 * n + 1000
    while len(out) < n and tries < limit:
        tries += 1
        item = s.sample(rng)
        if split_of(skill, item.key) != split or (unique and item.key in seen):
            continue
        seen.add(item.key)
        out.append(item)
    return out
