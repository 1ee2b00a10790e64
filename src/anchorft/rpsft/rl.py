"""The RL stage of the RPSFT paper: DAPO from an SFT checkpoint, through TRL's GRPOTrainer.

DAPO (Yu et al. 2025, arXiv:2503.14476) as the paper's release runs it: clipped surrogate with
decoupled ranges eps_low = 0.2, eps_high = 0.28 (DAPO eq. 8), token-mean loss over the group (TRL
loss_type "dapo"), G = 8 responses per prompt, group-normalised advantages, no KL term (beta = 0),
lr 1e-6, 100 steps. The reward is the correctness of the response's last \\boxed{} answer checked
with math-verify (gold first), optionally plus DAPO's soft overlong punishment (eq. 13, TRL's
`get_soft_overlong_punishment`). Truncated responses can be dropped from the loss
(`mask_truncated_completions`). DAPO's dynamic sampling (dropping groups whose rewards are all
equal) is not in TRL's GRPOTrainer; such groups get zero advantage and so add no gradient.

`run_rl` is the library entry point (the testbed's comparison calls it with its own prompts and
checker); `anchorft rl` wraps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from anchorft.io import save_figure, write_json
from anchorft.provenance import write_metrics

__all__ = [
    "RLSettings",
    "boxed_math_reward",
    "make_reward_func",
    "load_rl_dataset",
    "grpo_kwargs",
    "rl_memory_estimate",
    "format_memory_estimate",
    "run_rl",
]


@dataclass
class RLSettings:
    """DAPO settings; defaults are the paper's (release) values."""

    steps: int = 100
    learning_rate: float = 1e-6
    num_generations: int = 8
    prompts_per_step: int = 4
    max_completion_length: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    loss_type: str = "dapo"
    mask_truncated_completions: bool = False
    overlong_cache: int | None = None  # soft overlong punishment over the last N tokens; None: off
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    logging_steps: int = 1
    seed: int = 0
    save_model: bool = True
    # the release's scale (see configs/rl/dapo.yaml and `grpo_kwargs`)
    mini_batch_prompts: int | None = None  # prompts per policy update; None: one update per step
    micro_batch: int | None = None  # completions per device per forward pass; None: the whole mini-batch
    warmup_steps: int = 0  # RL steps (rollout batches) of linear warm-up, as VERL counts them
    delta: float | None = None  # dual clip: ratio capped at delta (VERL clip_ratio_c; TRL `delta`)
    master_dtype: str = "fp32"  # "fp32": fp32 weights and AdamW, bf16 autocast on GPU; "bf16": all bf16
    gradient_checkpointing: bool = True  # GPU only
    use_vllm: str = "auto"  # "auto": TRL's vLLM rollouts (colocate) when vLLM and CUDA are there; "true" / "false"
    vllm_gpu_memory_utilization: float = 0.3

    def validate(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (group advantages), got {self.num_generations}")
        if self.prompts_per_step < 1 or self.max_completion_length < 1:
            raise ValueError("prompts_per_step and max_completion_length must be >= 1")
        if not (0 <= self.epsilon and self.epsilon_high >= self.epsilon):
            raise ValueError(f"need 0 <= epsilon <= epsilon_high, got {self.epsilon}, {self.epsilon_high}")
        if self.beta < 0 or self.learning_rate <= 0 or self.temperature <= 0:
            raise ValueError("need beta >= 0, learning_rate > 0, temperature > 0")
        if self.overlong_cache is not None and not 0 < self.overlong_cache < self.max_completion_length:
            raise ValueError(f"overlong_cache must be in (0, max_completion_length), got {self.overlong_cache}")
        mini = self.mini_batch_prompts or self.prompts_per_step
        if mini < 1 or self.prompts_per_step % mini:
            raise ValueError(f"mini_batch_prompts ({mini}) must divide prompts_per_step ({self.prompts_per_step})")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch}")
        if self.master_dtype not in ("fp32", "bf16"):
            raise ValueError(f"master_dtype must be 'fp32' or 'bf16', got {self.master_dtype!r}")
        if str(self.use_vllm).lower() not in ("auto", "true", "false"):
            raise ValueError(f"use_vllm must be auto, true or false, got {self.use_vllm!r}")
        if self.delta is not None and self.delta <= 1 + self.epsilon_high:
            raise ValueError(f"delta (dual clip) must exceed 1 + epsilon_high, got {self.delta}")
        if self.warmup_steps < 0 or (self.warmup_steps and self.warmup_ratio):
            raise ValueError("give warmup_steps >= 0 or warmup_ratio, not both")


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

    rows: list[dict] = []
    bad: list[str] = []
    for _, lineno, obj in iter_jsonl(path, skip_bad=skip_bad, bad=bad):
        prompt = obj.get("prompt")
        answer = obj.get("answer")
        if answer is None and isinstance(obj.get("reward_model"), dict):
            answer = obj["reward_model"].get("ground_truth")
        ok_prompt = isinstance(prompt, str) or (
            isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt)
        )
        if not ok_prompt or answer is None or isinstance(answer, (list, dict)):
            msg = f"{path}: line {lineno}: need 'prompt' (str or messages) and 'answer' or 'reward_model.ground_truth'"
            if not skip_bad:
                raise ValueError(msg)
            bad.append(msg)
            continue
        rows.append({"prompt": prompt, "answer": str(answer)})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise ValueError(f"{path}: no usable rows")
    return rows


def grpo_kwargs(s: RLSettings, out_dir: Path, *, cuda: bool, has_vllm: bool, world_size: int = 1) -> dict:
    """GRPOConfig arguments for settings `s`. One RL step = `prompts_per_step` prompts x `num_generations`
    completions, then `prompts_per_step / mini_batch_prompts` policy updates (TRL optimiser steps), each
    over a mini-batch accumulated from micro-batches of `micro_batch` completions per device; so TRL's
    max_steps and warm-up count updates (steps x updates), as VERL's per-update schedule does."""
    mini = s.mini_batch_prompts or s.prompts_per_step
    updates = s.prompts_per_step // mini
    mini_completions = mini * s.num_generations
    micro = s.micro_batch or max(1, mini_completions // world_size)
    if mini_completions % (micro * world_size):
        raise ValueError(
            f"a mini-batch of {mini_completions} completions is not a whole number of micro-batches of {micro} "
            f"on {world_size} device(s)"
        )
    accum = mini_completions // (micro * world_size)
    want_vllm = str(s.use_vllm).lower()
    if want_vllm == "true" and not (has_vllm and cuda):
        raise ValueError("use_vllm true: vLLM rollouts need vllm installed and a CUDA device")
    use_vllm = want_vllm == "true" or (want_vllm == "auto" and has_vllm and cuda)
    warm = s.warmup_steps * updates if s.warmup_steps else int(round(s.warmup_ratio * s.steps * updates))
    kw = dict(
        output_dir=str(out_dir / "trainer"), max_steps=s.steps * updates, learning_rate=s.learning_rate,
        lr_scheduler_type="constant_with_warmup" if warm > 0 else "constant", warmup_steps=warm,
        weight_decay=s.weight_decay, max_grad_norm=s.max_grad_norm, per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum, steps_per_generation=accum * updates, num_iterations=1,
        num_generations=s.num_generations, max_completion_length=s.max_completion_length,
        temperature=s.temperature, top_p=s.top_p, epsilon=s.epsilon, epsilon_high=s.epsilon_high, delta=s.delta,
        beta=s.beta, loss_type=s.loss_type, mask_truncated_completions=s.mask_truncated_completions,
        logging_steps=s.logging_steps, save_strategy="no", report_to="none", seed=s.seed, data_seed=s.seed,
        use_cpu=not cuda, bf16=cuda, gradient_checkpointing=cuda and s.gradient_checkpointing,
        use_vllm=use_vllm, disable_tqdm=False,
    )  # fmt: skip
    if use_vllm:
        kw.update(vllm_mode="colocate", vllm_gpu_memory_utilization=s.vllm_gpu_memory_utilization)
    return kw


def rl_memory_estimate(n_params: int, n_gpus: int = 1, master_dtype: str = "fp32", vllm_colocate: bool = True) -> dict:
    """Bytes per GPU for the model states of full-parameter RL (an estimate; activations, the KV cache
    and fragmentation come on top): weights (4 B fp32 or 2 B bf16), gradients (same), AdamW's two
    moments (8 B fp32, 4 B bf16); `n_gpus` > 1 shards them (ZeRO-3 / FSDP2); vLLM colocated holds
    one more bf16 copy per GPU (2 B; tensor parallel would divide it)."""
    per = {"fp32": 4 + 4 + 8, "bf16": 2 + 2 + 4}[master_dtype]
    states = n_params * per / n_gpus
    rollout = 2 * n_params if vllm_colocate else 0
    total = states + rollout
    return {
        "n_params": n_params, "n_gpus": n_gpus, "bytes_per_param": per, "model_states_gb": states / 1e9,
        "vllm_weights_gb": rollout / 1e9, "total_gb_per_gpu": total / 1e9,
        "fits_80gb": total / 1e9 < 80, "sharding": "none" if n_gpus == 1 else "ZeRO-3 or FSDP2 (full shard)",
    }  # fmt: skip


def format_memory_estimate(est: dict) -> str:
    line = (
        f"memory estimate (model states only, an estimate): {est['n_params'] / 1e9:.2f}B parameters x "
        f"{est['bytes_per_param']} B / {est['n_gpus']} GPU(s) = {est['model_states_gb']:.0f} GB"
        f" + {est['vllm_weights_gb']:.0f} GB colocated vLLM weights = {est['total_gb_per_gpu']:.0f} GB per GPU"
    )
    if not est["fits_80gb"]:
        line += "; over one 80 GB GPU: shard with ZeRO-3 (accelerate + deepspeed) or FSDP2 (accelerate fsdp_version 2)"
    return line


def _plot_rewards(steps: Sequence[int], rewards: Sequence[float], path: Path) -> None:
    from anchorft.io import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, rewards, marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title("DAPO reward")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def run_rl(
    model,
    train_data: Sequence[dict],
    out_dir: str | Path,
    settings: RLSettings | None = None,
    *,
    tokenizer=None,
    reward_fn: Callable[[str, str], float] = boxed_math_reward,
    extra_reward_funcs: Sequence[Callable] = (),
    callbacks: Sequence = (),
) -> dict:
    """DAPO on `train_data` ([{"prompt": str | messages, "answer": str}]) starting from `model`
    (a local directory or a loaded causal LM, with `tokenizer`). Writes out_dir/{config.json,
    metrics.json, reward.png, model/}; returns metrics with the per-step reward curve and, under
    "model", the trained model object.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from anchorft.eval.loading import load_tokenizer

    settings = settings or RLSettings()
    settings.validate()
    if not train_data:
        raise ValueError("train_data is empty")
    for i, row in enumerate(train_data):
        if "prompt" not in row or "answer" not in row:
            raise ValueError(f"train_data[{i}] needs 'prompt' and 'answer'")
    cuda = torch.cuda.is_available()
    if isinstance(model, (str, Path)):
        model_dir = Path(model)
        if not (model_dir / "config.json").is_file():
            raise ValueError(f"model {model_dir}: no config.json there")
        tokenizer = tokenizer or load_tokenizer(model_dir)
        # fp32 master weights (bf16 autocast compute through bf16=True): lr 1e-6 updates round away in bf16
        dtype = torch.bfloat16 if cuda and settings.master_dtype == "bf16" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, trust_remote_code=False)
    elif tokenizer is None:
        raise ValueError("pass the tokenizer with a loaded model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if isinstance(train_data[0]["prompt"], list) and not getattr(tokenizer, "chat_template", None):
        raise ValueError("the prompts are chat messages but the tokenizer has no chat_template")

    import importlib.util
    import os

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    s = settings
    world = int(os.environ.get("WORLD_SIZE", "1"))
    kw = grpo_kwargs(s, out_dir, cuda=cuda, has_vllm=importlib.util.find_spec("vllm") is not None, world_size=world)
    est = rl_memory_estimate(sum(p.numel() for p in model.parameters()), world, s.master_dtype, kw["use_vllm"])
    print(format_memory_estimate(est), flush=True)
    args = GRPOConfig(**kw)
    reward_funcs: list[Callable] = [make_reward_func(reward_fn)]
    if s.overlong_cache is not None:
        from trl.rewards import get_soft_overlong_punishment

        reward_funcs.append(get_soft_overlong_punishment(s.max_completion_length, s.overlong_cache))
    reward_funcs += list(extra_reward_funcs)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": str(r["answer"])} for r in train_data])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks) or None,
    )
    resolved = {"settings": asdict(s), "n_prompts": len(train_data), "grpo_config": args.to_dict(), "memory": est}
    write_json(out_dir / "config.json", resolved, indent=2, default=str)
    trainer.train()

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
    }
    write_metrics(out_dir / "metrics.json", metrics, indent=2)
    if steps:
        _plot_rewards(steps, rewards, out_dir / "reward.png")
    if s.save_model:
        trainer.save_model(str(out_dir / "model"))
        tokenizer.save_pretrained(str(out_dir / "model"))
    metrics["model"] = trainer.model
    return metrics
