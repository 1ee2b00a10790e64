"""Final-answer extraction and checking: the last \\boxed{...}, option letters, math-verify with timeouts.

- `last_boxed` returns the content of the last complete `\\boxed{...}` / `\\fbox{...}` with balanced
  braces (escaped `\\{`, `\\}` do not count), as the RPSFT paper's evaluation takes the final answer.
- `extract_choice` returns the option label of a multiple-choice response (the OOD files: "Choices:"
  lines labelled A., B., ... or 1., 2., ...).
- `parsed_equal` checks a math answer with math-verify alone, gold first: verify(parse(gold), parse(answer)).
  It runs without math-verify's own timeouts, which use signal.alarm and fail off the main thread.
- `math_equal` is `parsed_equal` behind a string shortcut: identical strings are equal without parsing
  (a gold that math-verify cannot parse still matches itself).
- `MathChecker` runs `math_equal` in a persistent worker process with its own per-check timeout: a
  check that runs past it kills the worker (a new one starts on the next check) and counts as wrong.
  It is thread-safe and works from any thread (the RL reward, a thread pool, a notebook).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import itertools
import json
import logging
import os
import queue
import re
import subprocess
import sys
import threading
from functools import lru_cache

__all__ = [
    "last_boxed",
    "parse_choices",
    "extract_choice",
    "parsed_equal",
    "math_equal",
    "MathChecker",
    "default_checker",
    "checker_for",
    "grade",
]

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _balanced(text: str, open_at: int) -> int | None:
    """Index of the `}` that closes the `{` at `open_at`, skipping escaped braces; None if unclosed."""
    depth = 0
    k = open_at
    while k < len(text):
        ch = text[k]
        if ch == "\\":
            k += 2  # \{ \} \\ are single units
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return k
        k += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (or \\fbox{...}, or `\\boxed 5`) in `text`; None if none.

    "Last" is by the position of the command, so `\\boxed{\\boxed{5}}` gives `5`. A truncated box
    (no closing brace) is skipped in favour of the one before it.
    """
    for m in reversed(list(_BOX_RE.finditer(text))):
        k = m.end()
        while k < len(text) and text[k] == " ":
            k += 1
        if k < len(text) and text[k] == "{":
            close = _balanced(text, k)
            if close is not None:
                return text[k + 1 : close].strip()
        elif k > m.end():  # `\boxed 5`: one token up to whitespace or `$`
            tok = re.match(r"[^\s$]+", text[k:])
            if tok:
                return tok.group(0).rstrip(".,")
    return None


_CHOICE_LINE = re.compile(r"^\s*([A-Z]|\d{1,2})[.)]\s+(.*\S)\s*$")


def _next_label(label: str) -> str:
    return str(int(label) + 1) if label.isdigit() else chr(ord(label) + 1)


def parse_choices(question: str) -> dict[str, str]:
    """Option label -> text, from the lines after the last "Choices:" in a question ({} if none).

    Options are labelled in sequence (A., B., ... or 1., 2., ...). An option runs up to the line that
    starts the next label, so its text may span lines and blank lines (a letter, a list, a `$$`
    display); the last option ends at its first blank line (the instruction after the options)."""
    at = question.rfind("Choices:")
    if at < 0:
        return {}
    lines = question[at + len("Choices:") :].splitlines()
    starts: list[tuple[int, str, str]] = []  # (line number, label, first-line text)
    for i, line in enumerate(lines):
        m = _CHOICE_LINE.match(line)
        if m and (not starts or m.group(1) == _next_label(starts[-1][1])):
            starts.append((i, m.group(1), m.group(2)))
    out: dict[str, str] = {}
    for j, (i, label, head) in enumerate(starts):
        last = j + 1 == len(starts)
        body = lines[i + 1 : len(lines) if last else starts[j + 1][0]]
        if last:  # the last option ends at its first blank line
            body = itertools.takewhile(str.strip, body)
        out[label] = "\n".join([head] + [line.strip() for line in body]).strip()
    return out


# the formatting commands read through around an answer (a label, or a math answer as a whole)
_FORMATTING = r"text|textbf|textit|textrm|texttt|mathbf|mathrm|mathit|boldsymbol"
_WRAPPERS = re.compile(r"\\(?:" + _FORMATTING + r")\s*\{([^{}]*)\}")
_LABEL_STRIP = "()[]*.,;:! "  # brackets, bold, spaces and punctuation around a label
# a label at the head of "C. text" / "(C) text"; a number label followed by a digit after `.` or `:` is a number (1.5)
_LABEL_HEAD = re.compile(r"^\(?\s*([A-Z]|\d{1,2})\s*\)?(?:[.:)](?!\d)|\s|$)")
# "answer is (C)", "Answer: C", "option B", "answer is $\textbf{C}$": words in any case, the label in capitals
# ("answer is a bank": none), a whole word, a number label not the head of a decimal ("answer: 1.5": none). One
# repetition over the whitespace and wrappers: a long run of spaces costs linear time, not polynomial backtracking.
_ANSWER_PHRASE = re.compile(
    r"(?i:answer|option|choice)(?:\s*(?i:is))?(?:[:\s(\[*$]|\\(?:" + _FORMATTING + r")\s*\{)*"
    r"([A-Z]|\d{1,2}(?![.,]\d))\b"
)


def _norm_text(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().strip(".").casefold()


def _unwrap(raw: str) -> str:
    """`raw` without its formatting commands (to any depth, innermost first: \\text{\\textbf{C}}) and `$` signs."""
    s, n = raw, 1
    while n:
        s, n = _WRAPPERS.subn(r"\1", s)
    return s.replace("$", "").strip()


def _resolve_label(raw: str, choices: dict[str, str]) -> str | None:
    """Map one extracted string (a box content) to a label of `choices`, or None."""
    s = _unwrap(raw)
    labels = set(choices)
    bare = s.strip(_LABEL_STRIP).upper() if len(s.strip(_LABEL_STRIP)) <= 2 else None
    if bare in labels:
        return bare
    m = _LABEL_HEAD.match(s)
    if m and m.group(1) in labels:
        return m.group(1)
    by_text = {_norm_text(t): lab for lab, t in choices.items()}
    if _norm_text(s) in by_text:
        return by_text[_norm_text(s)]
    # numeric labels (1., 2., ...) answered with a letter, as the prompt asks "option letter (e.g., A)"
    if bare and len(bare) == 1 and bare.isalpha() and all(lab.isdigit() for lab in labels):
        idx = str(ord(bare) - ord("A") + 1)
        if idx in labels:
            return idx
    return None


def extract_choice(response: str, choices: dict[str, str]) -> str | None:
    """The option label a response picks: its last \\boxed{} (a label, "C. text", or an option's text),
    a bare label ("C", "(C)", "**C**"), else the last "answer is (C)" / "Answer: C" phrase; None when nothing
    names a valid label. Labels 1., 2., ... answered with a letter map A -> 1, B -> 2, ... Formatting commands
    (any depth), `$`, bold, brackets and trailing punctuation around a label are read through; a label is a
    whole word (`Cat`, `1.5` name none); in a phrase only a capital letter is a label ("answer is a bank")."""
    if not choices:
        raise ValueError("choices is empty: not a multiple-choice item")
    boxed = last_boxed(response)
    # a bare "C" / "(C)" / "C." / "**C**" / "$\\textbf{C}$": a response that is one label in wrappers
    if boxed is None and (len(response.strip()) <= 4 or len(_unwrap(response).strip(_LABEL_STRIP)) <= 2):
        boxed = response.strip()
    if boxed is not None:
        label = _resolve_label(boxed, choices)
        if label is not None:
            return label
    for m in reversed(list(_ANSWER_PHRASE.finditer(response))):
        label = _resolve_label(m.group(1), choices)
        if label is not None:
            return label
    return None


# ---------------------------------------------------------------- math-verify


def _quiet_math_verify() -> None:
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _parse_boxed_uncached(expr: str):
    from math_verify import parse  # lazy: loads math-verify (and sympy)

    return parse("\\boxed{" + expr + "}", parsing_timeout=None)


_parse_boxed = lru_cache(maxsize=4096)(_parse_boxed_uncached)  # an undecorated body: mutation testing reaches it


_WRAP_RE = re.compile(r"\\(?:" + _FORMATTING + r")\s*\{")


def _one_wrapper(expr: str) -> str:
    """Nested formatting wrappers around the whole answer reduced to the innermost one
    (`\\text{\\textbf{5}}` -> `\\textbf{5}`): math-verify reads one such wrapper, not two."""
    while (m := _WRAP_RE.match(expr)) and _balanced(expr, m.end() - 1) == len(expr) - 1:
        inner = expr[m.end() : -1].strip()
        if not ((m2 := _WRAP_RE.match(inner)) and _balanced(inner, m2.end() - 1) == len(inner) - 1):
            break
        expr = inner
    return expr


def _drop_trailing(expr: str) -> str:
    """`expr` stripped, without a sentence's trailing `.`, `,` or `;` (`5.` -> `5`); `\\,` (a thin space) is kept."""
    expr = expr.strip()
    cut = expr.rstrip(".,; \t\n")
    if cut.endswith("\\"):  # `5\,`: the comma is the command's
        cut = expr[: len(cut) + 1]
    return cut


def _inside_wrapper(expr: str) -> str | None:
    """What one formatting wrapper around the whole answer holds (`\\textbf{0.75}` -> `0.75`); None if none."""
    m = _WRAP_RE.match(expr)
    if m and _balanced(expr, m.end() - 1) == len(expr) - 1:
        return expr[m.end() : -1].strip() or None
    return None


# the emphasis commands that carry no meaning inside an answer (`\text`, which math-verify reads units from, is kept)
_EMPHASIS_RE = re.compile(r"\\(?:textbf|textit|textrm|texttt|mathbf|mathrm|mathit|boldsymbol)\s*\{")


def _without_emphasis(expr: str) -> str:
    """`expr` with every emphasis command replaced by what it holds, anywhere in it (`\\textbf{12}\\text{ cm}` ->
    `12\\text{ cm}`); unchanged where a brace is unbalanced."""
    while m := _EMPHASIS_RE.search(expr):
        close = _balanced(expr, m.end() - 1)
        if close is None:
            return expr
        expr = expr[: m.start()] + expr[m.end() : close] + expr[close + 1 :]
    return expr


def parsed_equal(gold: str, answer: str) -> bool:
    """math-verify equivalence, gold first: verify(parse(gold), parse(answer)); both parsed as \\boxed{...}.

    A trailing `.`, `,` or `;` is dropped (`5.` reads as 5: math-verify parses none of them). A formatting
    wrapper around the whole answer is read both ways, as math-verify reads it and without it: math-verify
    reads `\\textbf{0.75}` as a symbol named 0.75 (unequal to 0.75) and `\\textbf{12\\text{ cm}}` as text. Last,
    emphasis anywhere in the answer is read through (`\\textbf{12}\\text{ cm}`, which neither reading parses).

    No string shortcut and no timeout here (math-verify's own are turned off: they use signal.alarm,
    which only works on the main thread); call it through `MathChecker` for a timeout that works anywhere.
    """
    from math_verify import verify  # lazy: loads math-verify (and sympy)

    _quiet_math_verify()
    gold, answer = (_one_wrapper(_drop_trailing(str(x))) for x in (gold, answer))
    if not answer:
        return False
    g, a = _parse_boxed(gold), _parse_boxed(answer)
    if not g:
        return False
    if a and verify(g, a, timeout_seconds=None):
        return True
    inner = answer  # \textbf{\text{0.75.}} -> 0.75: the answer without its wrappers (and their trailing `.`)
    while (peeled := _inside_wrapper(inner)) is not None:
        inner = _drop_trailing(peeled)
    if inner != answer and inner and (a := _parse_boxed(inner)) and verify(g, a, timeout_seconds=None):
        return True
    plain = _drop_trailing(_without_emphasis(answer))  # emphasis on a part: \textbf{12}\text{ cm} -> 12\text{ cm}
    if plain == answer or not plain:
        return False
    a = _parse_boxed(plain)
    return bool(a and verify(g, a, timeout_seconds=None))


def math_equal(gold: str, answer: str) -> bool:
    """True when the stripped strings are identical (the string shortcut), else `parsed_equal(gold, answer)`."""
    gold, answer = str(gold).strip(), str(answer).strip()
    if answer and gold == answer:
        return True
    return parsed_equal(gold, answer)


def _load_fn(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _worker_loop(check_fn_spec: str) -> None:
    """Child process: read JSON [gold, answer] lines on stdin, write JSON true/false lines on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but the protocol goes to the real stdout
    _quiet_math_verify()
    check_fn = _load_fn(check_fn_spec)
    import math_verify  # noqa: F401  (imported before "ready": start-up is not counted in the timeout)

    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        gold, answer = json.loads(line)
        try:
            ok = bool(check_fn(gold, answer))
        except Exception:  # a parse/verify failure is a wrong answer, never a crash
            ok = False
        out.write("true\n" if ok else "false\n")
        out.flush()


class MathChecker:
    """math_equal in a worker process, with a per-check timeout that works from any thread.

    The worker is a plain subprocess (`python -m anchorft.eval.answers --worker`) talking JSON lines
    over pipes, so nothing of the caller's script is re-imported and no signal is used. A check
    running past `timeout_s` kills the worker and returns False (counted in `n_timeouts`); the next
    check starts a fresh worker. `check_fn` ("module:function", (gold, answer) -> bool) replaces
    math_equal, e.g. to test the timeout; the worker sees the caller's sys.path. With
    `string_shortcut` (the default) identical strings are equal without a call to the worker;
    `MathChecker(check_fn="anchorft.eval.answers:parsed_equal", string_shortcut=False)` parses every answer.
    """

    def __init__(
        self,
        timeout_s: float = 10.0,
        check_fn: str = "anchorft.eval.answers:math_equal",
        startup_timeout_s: float = 120.0,
        string_shortcut: bool = True,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if ":" not in check_fn:
            raise ValueError(f"check_fn must be 'module:function', got {check_fn!r}")
        self.timeout_s = float(timeout_s)
        self.check_fn = check_fn
        self.startup_timeout_s = float(startup_timeout_s)
        self.string_shortcut = bool(string_shortcut)
        self.n_timeouts = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue | None = None
        self._cache: dict[tuple[str, str], bool] = {}

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "anchorft.eval.answers", "--worker", self.check_fn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            env=env,
        )
        lines: queue.Queue = queue.Queue()

        def pump(stream=proc.stdout, q=lines) -> None:  # a reader thread: waits on the pipe, not the caller
            for line in stream:
                q.put(line.strip())
            q.put(None)  # EOF: the worker died

        threading.Thread(target=pump, daemon=True, name="anchorft-math-verify-reader").start()
        self._proc, self._lines = proc, lines
        try:
            ready = lines.get(timeout=self.startup_timeout_s)
        except queue.Empty:
            ready = None
        if ready != '"ready"':
            self._kill()
            raise RuntimeError("the math-verify worker process did not start (is anchorft importable?)")

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            for stream in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
        self._proc = self._lines = None

    def check(self, gold: str, answer: str | None) -> bool:
        """True when `answer` is math-verify-equivalent to `gold`; False on mismatch, error or timeout."""
        if answer is None or not str(answer).strip():
            return False
        key = (str(gold).strip(), str(answer).strip())
        if self.string_shortcut and key[0] == key[1]:
            return True
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
            try:
                self._proc.stdin.write(json.dumps(key) + "\n")
                self._proc.stdin.flush()
                reply = self._lines.get(timeout=self.timeout_s)
            except queue.Empty:
                self.n_timeouts += 1
                reply = None
            except (BrokenPipeError, OSError):
                reply = None
            if reply not in ("true", "false"):  # timeout or a dead worker: wrong, and restart next time
                self._kill()
            ok = reply == "true"
            if reply is not None and len(self._cache) < 200_000:
                self._cache[key] = ok
            return ok

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __enter__(self) -> MathChecker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_DEFAULT: MathChecker | None = None
_DEFAULT_LOCK = threading.Lock()


def checker_for(timeout_s: float | None = None) -> MathChecker:
    """A new MathChecker with `timeout_s` a check (None: MathChecker's default)."""
    return MathChecker() if timeout_s is None else MathChecker(timeout_s=timeout_s)


def default_checker() -> MathChecker:
    """A process-wide MathChecker (10 s per check), closed at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathChecker()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def grade(
    gold: str, response: str, choices: dict[str, str] | None = None, checker: MathChecker | None = None
) -> tuple[str | None, bool]:
    """(extracted answer, correct) for one response: option label when `choices`, else last \\boxed{} checked
    with math-verify through `checker` (the default one when None)."""
    if choices:
        label = extract_choice(response, choices)
        return label, label is not None and label == str(gold).strip()
    answer = last_boxed(response)
    if answer is None:
        return None, False
    return answer, (checker or default_checker()).check(str(gold), answer)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_loop(sys.argv[2])
    else:
        print("internal: python -m anchorft.eval.answers --worker module:function", file=sys.stderr)
        sys.exit(2)
