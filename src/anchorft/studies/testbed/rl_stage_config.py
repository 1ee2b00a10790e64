"""The settings of the testbed's RL stage (`anchorft toy rl`), apart from the stage itself
(`anchorft.studies.testbed.rl_stage`, which loads torch and TRL): the command's flags, its `--help` and the
checks of its values come from here before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from anchorft.rpsft.anchor_options import AnchorOptions, anchor_option_names
from anchorft.rpsft.prechecks import method_rows
from anchorft.toy import skills as sk

__all__ = ["MATH_SKILLS", "RL_ANCHOR_CHOICES", "RLStageSettings"]

MATH_SKILLS = ("math_easy", *sk.ID_SKILLS)  # ID math skills (boxed answers)


class _RLAnchorChoices:
    """'none' and the anchored methods (`anchorft.rpsft.methods.RL_ANCHOR_METHODS`, read from the methods table's
    source while that module, which loads torch, is not imported: `prechecks.method_rows`)."""

    def __iter__(self):
        return iter(("none", *(name for name, anchored, _ in method_rows() if anchored)))

    def __contains__(self, name) -> bool:
        return name in tuple(self)


RL_ANCHOR_CHOICES = _RLAnchorChoices()


@dataclass
class RLStageSettings(AnchorOptions):
    """DAPO on the testbed (every field is a flag of `anchorft toy rl`). Defaults are fitted to the 0.2-1M-parameter
    testbed models on a CPU (the paper's lr 1e-6 / 100 steps does not move them); the DAPO clip, loss, G and beta
    are the paper's (`anchorft.rpsft.dapo_config.DAPOConfig` defaults). The weight anchor during DAPO is
    `anchor_method` with the `AnchorOptions` (DAPOConfig's; docs/anchoring.md), W_0 = each RL starting model."""

    anchor_rank: int = field(default=24, metadata={"help": "k of the rpsft anchor (the paper's rank at width 128)."})
    steps: int = field(default=60, metadata={"help": "DAPO RL steps."})
    learning_rate: float = field(default=3e-4, metadata={"help": "learning rate."})
    prompts_per_step: int = field(default=8, metadata={"help": "prompts a step, each with num_generations."})
    num_generations: int = field(default=8, metadata={"help": "completions per prompt (G)."})
    max_completion_length: int = field(default=16, metadata={"help": "tokens per completion at most."})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts."})
    prompt_skills: tuple[str, ...] = field(
        default=(),
        metadata={"help": f"ID math skills for the RL prompts {MATH_SKILLS}; none: the comparison's id_skill."},
    )
    n_prompts: int = field(default=512, metadata={"help": "training-split prompts (split evenly over the skills)."})
    prompt_seed: int = field(default=0, metadata={"help": "seed of the prompt draw."})
    seed: int = field(default=0, metadata={"help": "DAPO seed (sampling, data order)."})
    skill_eval_items: int = field(
        default=100, metadata={"help": "held-out items per prompt skill for its greedy accuracy before / after."}
    )
    save_models: bool = field(default=True, metadata={"help": "keep the RL models (OUT/NAME/model)."})
    anchor_method: str = field(
        default="none",
        metadata={"help": "weight anchor during DAPO: 'none' or an anchored method.", "choices": RL_ANCHOR_CHOICES},
    )

    def check_values(self) -> None:
        """The checks that need no TRL (before torch loads: seconds); `validate` adds DAPOConfig's."""
        for name in ("steps", "prompts_per_step", "max_completion_length", "n_prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations: must be >= 2 (group advantages), got {self.num_generations}")
        for name in ("learning_rate", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.anchor_method not in RL_ANCHOR_CHOICES:
            raise ValueError(f"anchor_method: {self.anchor_method!r} is not 'none' or an anchored method "
                             f"{list(RL_ANCHOR_CHOICES)}")  # fmt: skip
        if self.n_prompts < 1:
            raise ValueError(f"n_prompts: must be >= 1, got {self.n_prompts}")
        if self.skill_eval_items < 0:
            raise ValueError(f"skill_eval_items: must be >= 0, got {self.skill_eval_items}")
        if bad := [s for s in self.prompt_skills if s not in MATH_SKILLS]:
            raise ValueError(f"prompt_skills: {bad} are not ID math skills {MATH_SKILLS}")

    def validate(self) -> None:
        self.check_values()
        self.rl_settings()  # DAPOConfig checks the rest (its bounds, the anchor options) when built

    def rl_settings(self):
        from anchorft.rpsft.dapo_config import DAPOConfig  # lazy: loads TRL

        same = ("steps", "learning_rate", "num_generations", "prompts_per_step", "max_completion_length")
        same += ("temperature", "seed", "anchor_method", *anchor_option_names())
        return DAPOConfig(**{name: getattr(self, name) for name in same}, save_model=self.save_models)
