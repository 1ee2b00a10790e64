"""IFEval scoring with lm-evaluation-harness's own checkers, loose variant.

The IFEval file of the RPSFT paper's suite (`ifeval_loose*.jsonl`) carries, per item, the list
`reward_model.instructions` of `{instruction_id, kwargs}` in IFEval's format. A response is correct
when it follows every instruction under IFEval's loose test (Zhou et al. 2023, arXiv:2311.07911,
section 3: the response also counts when it follows after removing its first line, its last line,
both, and/or every `*`). The checks are lm-eval's (`lm_eval.tasks.ifeval.utils.
test_instruction_following_loose` and the instruction classes it calls); nothing here re-implements
an instruction.

Two lm-eval checks need nltk's Punkt sentence model: `length_constraints:number_sentences` (through
`instructions_util.count_sentences`, which asks for the pickled `punkt` model) and
`change_case:capital_word_frequency` (through `nltk.word_tokenize`, which asks for `punkt_tab`). Both run
with `punkt_sentence_tokenizer`: nltk's installed `punkt_tab` English model, else a Punkt model trained
here offline, whose sentence counts can differ from the official model's on rare abbreviations.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Iterator, Sequence

from anchorft.errors import MissingExtra

__all__ = ["ifeval_available", "punkt_sentence_tokenizer", "ifeval_follows"]

# A short English text for PunktTrainer (written for this module) and abbreviations it should know.
_PUNKT_TRAINING_TEXT = (
    "The committee met on Monday. It reviewed the budget, the schedule and the staffing plan. "
    "Mr. Brown opened the meeting at nine. Dr. Lee presented the results of the survey. "
    "Most members agreed with the proposal. A few asked for more time! Would the vote wait? "
    "No. The vote took place at noon, and the motion passed. The next meeting is in March. "
    "Ms. Green will chair it. Questions can be sent by e-mail before then. Thank you all. "
)
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "u.s", "inc", "no"}


def ifeval_available() -> tuple[bool, str]:
    """(True, "") when lm-eval's IFEval checkers import, else (False, why)."""
    try:
        with _quiet():
            import lm_eval.tasks.ifeval.utils  # noqa: F401
    except ImportError as e:
        return False, f"lm-eval's IFEval checkers do not import ({e}); pip install 'lm-eval[ifeval]>=0.4.5'"
    return True, ""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """lm-eval tries `nltk.download("punkt_tab")` at import and prints its failure without network."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@functools.lru_cache(maxsize=1)
def punkt_sentence_tokenizer():
    """The Punkt English sentence tokenizer the checks use (installed punkt_tab, else one built offline)."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTokenizer, PunktTrainer  # lazy: loads scipy

    try:
        return PunktTokenizer("english")
    except (LookupError, OSError):
        pass
    trainer = PunktTrainer()
    trainer.train(_PUNKT_TRAINING_TEXT, finalize=True)
    params = trainer.get_params()
    params.abbrev_types |= _ABBREVIATIONS
    return PunktSentenceTokenizer(params)


@contextlib.contextmanager
def _with_punkt() -> Iterator[None]:
    """Point lm-eval's sentence counter and nltk's word tokenizer at `punkt_sentence_tokenizer`."""
    import nltk.tokenize as nt  # lazy: loads scipy
    from lm_eval.tasks.ifeval import instructions_util as iu  # lazy: loads datasets (and pyarrow)

    tok = punkt_sentence_tokenizer()
    saved = (iu._get_sentence_tokenizer, nt._get_punkt_tokenizer)
    iu._get_sentence_tokenizer = lambda: tok
    nt._get_punkt_tokenizer = lambda language="english": tok
    try:
        yield
    finally:
        iu._get_sentence_tokenizer, nt._get_punkt_tokenizer = saved


def ifeval_follows(response: str, instructions: Sequence[dict], prompt: str) -> tuple[bool, list[bool]]:
    """(all followed, per-instruction result) under lm-eval's loose IFEval test. `prompt` is the user
    message (the `combination:repeat_prompt` check and instructions that read the prompt use it)."""
    ok, why = ifeval_available()
    if not ok:
        raise MissingExtra(why)
    with _quiet():
        from lm_eval.tasks.ifeval.instructions_registry import INSTRUCTION_DICT  # lazy: the lmeval extra
        from lm_eval.tasks.ifeval.utils import InputExample, test_instruction_following_loose  # lazy: the lmeval extra
    if not all(isinstance(inst, dict) and isinstance(inst.get("instruction_id"), str) for inst in instructions):
        raise ValueError("each instruction must be {'instruction_id': str, 'kwargs': {...}}")
    ids = [inst["instruction_id"] for inst in instructions]
    kwargs = [{k: v for k, v in (inst.get("kwargs") or {}).items() if v is not None} for inst in instructions]
    unknown = [i for i in ids if i not in INSTRUCTION_DICT]
    if unknown:
        raise ValueError(f"unknown IFEval instruction_id(s) {unknown}")
    inp = InputExample(key=0, instruction_id_list=ids, prompt=prompt, kwargs=kwargs)
    with _with_punkt():
        out = test_instruction_following_loose(inp, response)
    return bool(out.follow_all_instructions), [bool(x) for x in out.follow_instruction_list]
