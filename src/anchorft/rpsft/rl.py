"""The RL stage of the RPSFT paper: DAPO from an SFT checkpoint, through TRL's GRPOTrainer.

DAPO (Yu et al. 2025, arXiv:2503.14476) as the paper's release runs it: clipped surrogate with
decoupled ranges eps_low = 0.2, eps_high = 0.28 (DAPO eq. 8), token-mean loss over the group (TRL
loss_type "dapo"), G = 8 responses per prompt, group-normalised advantages, no KL term (beta = 0),
lr 1e-6, 100 steps. The reward is the correctness of the response's last \\boxed{} answer checked
with math-verify (gold first), optionally plus DAPO's soft overlong punishment (eq. 13, TRL's
`get_soft_overlong_punishment`). Truncated responses can be dropped from the loss
(`mask_truncated_completions`). DAPO's dynamic sampling (dropping groups whose rewards are all
equal) is not in TRL's GRPOTrainer; such groups get zero advantage and so add no gradient.

The settings are `DAPOConfig` (TRL's GRPOConfig counted in RL steps, `anchorft.rpsft.dapo_config`). `run_rl` is
the library entry point (the testbed's comparison calls it with its own prompts and checker); `anchorft rl`
wraps it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from anchorft import stop
from anchorft.io import save_figure, write_json
from anchorft.provenance import write_metrics
from anchorft.rpsft.dapo_config import DAPOConfig
from anchorft.rpsft.estimate import format_memory_estimate, rl_memory_estimate

__all__ = [
    "DAPOConfig",
    "build_rl_anchor",
    "drop_long_prompts",
    "boxed_math_reward",
    "make_reward_func",
    "load_rl_dataset",
    "run_rl",
]


def boxed_math_reward(completion: str, answer: str) -> float:
    """1.0 when the completion's last \\boxed{} is math-verify-equivalent to `answer`, else 0.0."""
    from anchorft.eval.answers import default_checker, last_boxed

    got = last_boxed(completion)
    return float(got is not None and default_checker().check(str(answer), got))


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    raise ValueError(f"unexpected completion type {type(completion).__name__}")


def make_reward_func(reward_fn: Callable[[str, str], float] = boxed_math_reward) -> Callable[..., list[float]]:
    """A TRL reward function from a per-completion `reward_fn(completion, answer) -> float`; the
    dataset's `answer` column is the gold answer."""

    def correctness_reward(completions, answer, **kwargs) -> list[float]:
        return [float(reward_fn(_text(c), a)) for c, a in zip(completions, answer)]

    return correctness_reward


def load_rl_dataset(path: str | Path, skip_bad: bool = False, limit: int | None = None) -> list[dict]:
    """Prompts + answers from JSONL: the paper's benchmark format (prompt messages,
    reward_model.ground_truth) or {"prompt": str | messages, "answer": str}."""
    from anchorft.io import iter_jsonl

    def row(_: int, __: int, obj: dict) -> dict:
        prompt = obj.get("prompt")
        answer = obj.get("answer")
        if answer is None and isinstance(obj.get("reward_model"), dict):
            answer = obj["reward_model"].get("ground_truth")
        ok_prompt = isinstance(prompt, str) or (
            isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt)
        )
        if not ok_prompt or answer is None or isinstance(answer, (list, dict)):
            raise ValueError("need 'prompt' (str or messages) and 'answer' or 'reward_model.ground_truth'")
        return {"prompt": prompt, "answer": str(answer)}

    rows: list[dict] = []
    for _, _, r in iter_jsonl(path, skip_bad=skip_bad, parse=row):
        rows.append(r)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise ValueError(f"{path}: no usable rows")
    return rows


def prompt_length(prompt, tokenizer) -> int:
    """Tokens of a prompt as the trainer feeds it: chat messages through the tokenizer's chat template with the
    generation prompt, text as it is."""
    if isinstance(prompt, list):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding in recent transformers
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])


def drop_long_prompts(rows: Sequence[dict], tokenizer, max_length: int | None) -> tuple[list[dict], int]:
    """(the rows whose prompt has at most `max_length` tokens, how many were dropped); None keeps every row.

    The release's RL data loader drops prompts over 2,048 tokens (VERL's `filter_overlong_prompts`) rather than
    truncating them; TRL's GRPOConfig has no such setting."""
    if max_length is None:
        return list(rows), 0
    kept = [r for r in rows if prompt_length(r["prompt"], tokenizer) <= max_length]
    return kept, len(rows) - len(kept)


def _plot_rewards(steps: Sequence[int], rewards: Sequence[float], path: Path) -> None:
    from anchorft.io import pyplot

    fig, ax = pyplot().subplots(figsize=(5, 3.2))
    ax.plot(steps, rewards, marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title("DAPO reward")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def build_rl_anchor(model, s: DAPOConfig):
    """The RL stage's anchor (None for anchor_method "none"): W_0 is the RL starting weights ("start", e.g. the SFT
    model) or the model in the folder `anchor_reference` (e.g. the base model; the penalty is then not 0 at step 0),
    at full rank for a method with the table's `full_rank` (l2). Its metadata records the reference."""
    if s.anchor_spec is None:
        return None
    import torch

    from anchorft.eval.loading import load_causal_lm

    ref = model
    if s.anchor_reference != "start":
        if not (Path(s.anchor_reference) / "config.json").is_file():
            raise ValueError(
                f"anchor_reference {s.anchor_reference}: neither 'start' nor a model folder (no config.json)"
            )
        ref = load_causal_lm(s.anchor_reference)
    anchor = s.build_anchor(ref, full_rank=s.anchor_spec.full_rank, generator=torch.Generator().manual_seed(s.seed))
    anchor.meta["reference"] = s.anchor_reference
    anchor.check_model(model, check_fingerprint=s.anchor_reference == "start")
    return anchor


def _anchored(base):
    """`base` (TRL's GRPOTrainer) adding lambda * dR/dW once per optimiser step with `RPSFTTrainer`'s step
    (`anchorft.rpsft.trainer.AnchorSteps`): in closed form to `.grad` after the step's last backward; under DeepSpeed
    (whose engine steps inside that backward) as a loss term of value 0 in the step's last micro-batch."""
    from anchorft.rpsft.trainer import AnchorSteps  # lazy: loads datasets (and pyarrow)

    class AnchoredGRPOTrainer(AnchorSteps, base):
        def __init__(self, *args, anchor, anchor_lambda: float, **kwargs):
            super().__init__(*args, **kwargs)
            self.anchor = self._active_anchor = anchor
            self.anchor_lambda = self._anchor_scale = float(anchor_lambda)
            self.anchor_applications = 0
            self._anchor_last = None
            self._anchor_mode = "autograd" if self.is_deepspeed_enabled else "grad"

        def _anchor_due(self) -> bool:  # called once a micro-batch, in the mode's place: True means applied
            due = self.anchor_lambda > 0 and self.model.training and self.accelerator.gradient_state.sync_gradients
            if due and self.anchor_applications == 0:
                self.anchor.to(model=self.model)
            self.anchor_applications += due
            return due

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            return self._add_anchor_term(loss, num_items_in_batch)

    return AnchoredGRPOTrainer


def run_rl(
    model,
    train_data: Sequence[dict],
    out_dir: str | Path,
    config: DAPOConfig | None = None,
    *,
    tokenizer=None,
    reward_fn: Callable[[str, str], float] = boxed_math_reward,
    extra_reward_funcs: Sequence[Callable] = (),
    callbacks: Sequence = (),
) -> dict:
    """DAPO on `train_data` ([{"prompt": str | messages, "answer": str}]) starting from `model`
    (a local directory or a loaded causal LM, with `tokenizer`). Writes out_dir/{config.json,
    metrics.json, reward.png, model/} (TRL's own output in out_dir/trainer); returns metrics with the
    per-step reward curve and, under "model", the trained model object.
    """
    import torch
    from datasets import Dataset  # lazy: loads datasets (and pyarrow)
    from trl import GRPOTrainer

    from anchorft.eval.loading import load_causal_lm, load_tokenizer

    args = config or DAPOConfig()
    from anchorft.rpsft.train import check_launch  # lazy: loads datasets (and pyarrow)

    check_launch(args, args.anchor_spec is not None, f"anchor_method={args.anchor_method!r}")
    if not train_data:
        raise ValueError("train_data is empty")
    for i, row in enumerate(train_data):
        if "prompt" not in row or "answer" not in row:
            raise ValueError(f"train_data[{i}] needs 'prompt' and 'answer'")
    if isinstance(model, (str, Path)):
        model_dir = Path(model)
        if not (model_dir / "config.json").is_file():
            raise ValueError(f"model {model_dir}: no config.json there")
        tokenizer = tokenizer or load_tokenizer(model_dir)
        # fp32 master weights (bf16 autocast compute through bf16=True): lr 1e-6 updates round away in bf16
        dtype = torch.bfloat16 if torch.cuda.is_available() and args.master_dtype == "bf16" else torch.float32
        model = load_causal_lm(model_dir, dtype)
    elif tokenizer is None:
        raise ValueError("pass the tokenizer with a loaded model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if isinstance(train_data[0]["prompt"], list) and not getattr(tokenizer, "chat_template", None):
        raise ValueError("the prompts are chat messages but the tokenizer has no chat_template")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    args.output_dir = str(out_dir / "trainer")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    est = rl_memory_estimate(sum(p.numel() for p in model.parameters()), world, args.master_dtype, args.use_vllm)
    print(format_memory_estimate(est), flush=True)
    reward_funcs: list[Callable] = [make_reward_func(reward_fn)]
    if args.overlong_cache is not None:
        from trl.rewards import get_soft_overlong_punishment

        reward_funcs.append(get_soft_overlong_punishment(args.max_completion_length, args.overlong_cache))
    reward_funcs += list(extra_reward_funcs)
    n_given = len(train_data)
    train_data, dropped = drop_long_prompts(train_data, tokenizer, args.max_prompt_length)
    if dropped:
        print(f"dropped {dropped} of {n_given} prompts longer than {args.max_prompt_length} tokens", flush=True)
    if not train_data:
        raise ValueError(f"every prompt is longer than max_prompt_length ({args.max_prompt_length} tokens)")
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": str(r["answer"])} for r in train_data])
    anchor = build_rl_anchor(model, args)
    extra = {} if anchor is None else {"anchor": anchor, "anchor_lambda": args.anchor_lambda}
    from anchorft.rpsft.stopping import StopOnSignal

    trainer = (GRPOTrainer if anchor is None else _anchored(GRPOTrainer))(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        # SIGTERM / Ctrl-C: every rank stops at the same step, after the trainer's own callbacks (anchorft.stop)
        callbacks=[*callbacks, StopOnSignal()],
        **extra,
    )
    from anchorft.rpsft.progress import use_readable_progress

    use_readable_progress(trainer)  # a bar and a short line per log; the full dicts in OUTPUT_DIR/log.jsonl
    stop.check(agree=True)  # a signal swallowed while the data or the models were prepared
    resolved = {"dapo": args.dapo_settings(), "dapo_config": args.to_dict(), "n_prompts": len(train_data)}
    resolved["n_prompts_dropped"] = dropped
    resolved["memory"] = est
    if anchor is not None:
        resolved["anchor"] = {"repr": repr(anchor), "reference": args.anchor_reference, "ranks": anchor.ranks}
        anchor.save(out_dir / "anchor")
    write_json(out_dir / "config.json", resolved, indent=2, default=str)
    with stop.deferred():  # a signal stops training at the step's end, after a checkpoint (anchorft.rpsft.stopping)
        trainer.train()
    stop.check(agree=True)  # stopped by a signal: the run is interrupted, not finished

    hist = [h for h in trainer.state.log_history if "reward" in h]
    steps = [int(h["step"]) for h in hist]
    rewards = [float(h["reward"]) for h in hist]
    name = reward_funcs[0].__name__
    correct = [float(h.get(f"rewards/{name}/mean", h["reward"])) for h in hist]
    metrics = {
        "steps": steps,
        "reward": rewards,
        "correctness": correct,
        "completion_length": [float(h.get("completions/mean_length", float("nan"))) for h in hist],
        "reward_first": rewards[0] if rewards else None,
        "reward_last": rewards[-1] if rewards else None,
        "optimizer_steps": int(trainer.state.global_step),  # policy updates (RL steps x updates per step)
        "prompts_dropped": dropped,  # longer than max_prompt_length
    }
    if anchor is not None:
        metrics["anchor"] = {
            "applications": trainer.anchor_applications,
            "reference": args.anchor_reference,
            **anchor.drift(trainer.model),
        }
    write_metrics(out_dir / "metrics.json", metrics, indent=2)
    if steps:
        _plot_rewards(steps, rewards, out_dir / "reward.png")
    if args.save_model:
        from anchorft.rpsft.trainer import save_full_model  # lazy: loads datasets (and pyarrow)

        if not save_full_model(trainer, str(out_dir / "model")):  # full weights also under sharded FSDP
            trainer.save_model(str(out_dir / "model"))
        tokenizer.save_pretrained(str(out_dir / "model"))
    metrics["model"] = trainer.model
    return metrics
