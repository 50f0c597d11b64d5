"""Typed parameters, validated from params.yaml: unknown keys and bad values are one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gymflow.envs import ENVS
from gymflow.errors import UserError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstructionsConfig(Section):
    """Per environment, how many tasks each split holds. Train and eval never share a task."""

    seed: int = 0
    train: dict[str, int] = Field(description="train tasks per environment (AgentGym: hundreds to thousands)")
    eval: dict[str, int] = Field(description="held-out AgentEval tasks per environment (AgentGym: 25-200)")


class TrajectoriesConfig(Section):
    """AgentTraj: how many train tasks per environment the expert solves (the rest is left to exploration)."""

    tasks: dict[str, int]


class ModelConfig(Section):
    """The initial policy. `name_or_path` names a model (local directory or Hub id) used unchanged; when it is
    null, a byte-level BPE tokenizer and a small Qwen2-style decoder are built from the sizes below."""

    name_or_path: str | None = None
    seed: int = 0
    vocab_size: int = Field(
        2048, ge=300, description="BPE vocabulary, special tokens included (>= 256 bytes)"
    )
    hidden_size: int = Field(128, ge=8)
    intermediate_size: int = Field(512, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(4, ge=1)
    max_length: int = Field(4096, ge=64, description="longest sequence (positions) the model handles")

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        return self


class SFTParams(Section):
    """Behaviour cloning on AgentTraj (TRL's SFTTrainer, loss on assistant tokens only)."""

    envs: dict[str, PositiveInt] = Field(
        min_length=1,
        description="environment -> passes over its AgentTraj episodes (its epochs); the mixture is shuffled",
    )

    @field_validator("envs", mode="before")
    @classmethod
    def _passes_per_env(cls, value: object) -> object:
        if isinstance(value, list):  # the list form of older params.yaml files
            example = ", ".join(f"{env}: 3" for env in value[:2])
            raise ValueError(f"give each environment its passes over AgentTraj, e.g. {{{example}}}")
        return value

    lr: float = Field(2e-3, gt=0)
    batch_size: int = Field(8, ge=1, description="episodes per step")
    warmup: float = Field(0.05, ge=0, description="warm-up: a fraction of the steps (< 1) or a step count")
    max_length: int = Field(2048, ge=64, description="longer episodes are truncated")
    bf16: bool | Literal["auto"] = Field(
        "auto",
        description="bf16 autocast; auto: where the hardware computes bf16 natively (without it, CPU autocast "
        "emulates bf16 and trains 12x slower than fp32 on an AVX2-only CPU)",
    )
    lora_rank: int = Field(
        0, ge=0, description="0: full fine-tuning (the tiny default); > 0: LoRA of that rank"
    )
    seed: int = 0
    log_every: int = Field(10, ge=1)

    @field_validator("bf16", mode="before")
    @classmethod
    def _bf16_choice(cls, value: object) -> object:
        if value not in (True, False, "auto"):
            raise ValueError(f"{value!r} is not a precision: use true, false or auto")
        return value


class EvalParams(Section):
    """AgentEval: a policy plays the eval split greedily, and k more times sampled for pass@k. Which policies
    are evaluated is the stage list in dvc.yaml (`evaluate@init`, `evaluate@sft`, `evol_evaluate@<iteration>`)."""

    envs: list[str] = Field(min_length=1)
    k: int = Field(0, ge=0, description="sampled episodes per task for pass@k; 0: greedy only")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(96, ge=1, description="per reply; must exceed the longest thought")
    max_length: int = Field(4096, ge=64)
    batch_size: int = Field(32, ge=1, description="episodes sharing one generation batch")
    seed: int = 0
    servers: dict[str, str] = Field(
        {},
        description="policy -> base URL of an OpenAI-compatible server (vLLM, `gymflow serve-model`) that "
        "samples for it; other policies sample in process",
    )


class EvolSettings(Section):
    """One AgentEvol iteration (AgentGym Algorithm 1): explore, keep what succeeded, learn."""

    tasks: dict[str, PositiveInt | None] = Field(
        min_length=1,
        description="environment -> train tasks explored per iteration (a fresh seeded draw); null: all of them",
    )
    samples: PositiveInt = Field(1, description="episodes per task (K)")
    temperature: float = Field(0.7, gt=0)
    threshold: float = Field(
        0.0, description="keep explored episodes that succeeded with reward >= threshold"
    )
    merge_sft: bool = Field(True, description="learn on the kept episodes plus the SFT data (AgentTraj)")
    learn_from: Literal["init", "sft", "last"] = Field(
        "init", description="the model each learning step starts from; last: the agent that explored"
    )
    epochs: float = Field(
        1.0, gt=0, description="passes over the learning data, as a multiple of sft.envs' passes per env"
    )
    lr: float | None = Field(None, gt=0, description="learning rate of each learning step; null: sft.lr")
    seed: int = 0


class Iteration(Section):
    """An iteration names the agent that explores in it; any key of `evol` given here overrides it for this
    iteration only (DVC then reruns only this iteration and the ones after it)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    explorer: str = Field(description="model under data/models that explores: sft, or an earlier iteration")


class EvolParams(EvolSettings):
    """AgentEvol and its variants: rejection fine-tuning is one iteration from the SFT agent without merging,
    expert iteration continues from the last agent (`learn_from: last`)."""

    iterations: dict[str, Iteration] = Field(min_length=1, description="name -> iteration, in order (M)")

    def at(self, name: str) -> EvolSettings:
        """The settings of iteration `name`: the shared ones with its overrides."""
        if name not in self.iterations:
            raise ValueError(f"no iteration {name!r} in evol.iterations (have {list(self.iterations)})")
        shared = self.model_dump(exclude={"iterations"})
        overrides = self.iterations[name].model_dump(exclude={"explorer"})
        return EvolSettings.model_validate({**shared, **overrides})

    def index(self, name: str) -> int:
        """1 for the first iteration; the `iteration` column of its rollouts."""
        return list(self.iterations).index(name) + 1

    @model_validator(mode="after")
    def _check_chain(self) -> EvolParams:
        seen = ["sft"]
        for name, it in self.iterations.items():
            if name in ("init", "sft") or not name.replace("_", "").isalnum():
                raise ValueError(f"iteration name {name!r} must be letters, digits or _, and not init or sft")
            if it.explorer not in seen:
                raise ValueError(
                    f"iteration {name} explores with {it.explorer!r}; use sft or an earlier iteration {seen[1:]}"
                )
            try:
                self.at(name)
            except ValidationError as e:
                raise ValueError(f"evol.iterations.{name}: {_describe(e)}") from None
            seen.append(name)
        return self


class PGSwitches(Section):
    """The switches of the policy-gradient trainer (`gymflow.train.pg`); each algorithm is a preset of them."""

    advantage: Literal["loo", "group_norm", "reinforcepp", "gae"] = Field(
        "loo",
        description="loo: leave-one-out (LOOP Eq. 3); group_norm: GRPO's (R - mean) / std; reinforcepp: "
        "returns whitened over the batch; gae: a value head on the policy's last hidden state (LOOP C.5)",
    )
    level: Literal["token", "turn", "traj"] = Field(
        "token", description="importance weight per token (Eq. 10), per reply, or per trajectory (Eq. 9)"
    )
    epochs: PositiveInt = Field(2, description="passes over each iteration's rollouts")
    minibatches: PositiveInt = Field(
        4, description="gradient steps per pass; epochs 1 and minibatches 1: one on-policy step"
    )
    clip: float = Field(0.2, gt=0, description="PPO's epsilon")
    min_abs_advantage: float = Field(0.0, ge=0, description="drop episodes with |A| below this (LOOP: 0.01)")
    kl_coef: float = Field(
        0.0, ge=0, description="> 0: KL to a frozen copy of the start agent, as a loss term"
    )
    kl_abort: float | None = Field(
        None, gt=0, description="skip the rest of an iteration's steps once the KL to its sampler passes this"
    )
    max_grad_norm: float | None = Field(1.0, gt=0)
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount (LOOP C.5: 1)")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda (LOOP C.5: 1; < 1 diverged there)")
    value_lr: float = Field(1e-3, gt=0, description="the value head's learning rate (gae)")
    value_warmup: int = Field(
        0, ge=0, description="value-only passes over the first iteration's rollouts before any policy step"
    )

    @model_validator(mode="after")
    def _check(self) -> PGSwitches:
        if self.advantage == "gae" and self.level != "token":
            raise ValueError("advantage gae gives one advantage per token: use level token")
        return self


# The algorithms, as switch settings (LOOP Table 1; AgentGym-RL 3.2.2). On-policy presets take one gradient step
# per batch of rollouts (GRPO and RLOO as published); the others reuse each batch for 2 epochs of 4 mini-batches.
PRESETS: dict[str, dict[str, object]] = {
    "loop": {"advantage": "loo", "level": "token", "min_abs_advantage": 0.01},
    "loop_turn": {"advantage": "loo", "level": "turn", "min_abs_advantage": 0.01},
    "loop_traj": {"advantage": "loo", "level": "traj", "min_abs_advantage": 0.01},
    "loop_rwnorm": {"advantage": "group_norm", "level": "token", "min_abs_advantage": 0.01},
    "rloo": {"advantage": "loo", "level": "traj", "epochs": 1, "minibatches": 1},
    "grpo": {"advantage": "group_norm", "level": "token", "epochs": 1, "minibatches": 1, "kl_coef": 0.04},
    "grpo_nokl": {"advantage": "group_norm", "level": "token", "epochs": 1, "minibatches": 1},
    "reinforcepp": {"advantage": "reinforcepp", "level": "token", "epochs": 1, "kl_coef": 0.001},
    "ppo": {"advantage": "gae", "level": "token", "kl_coef": 0.001, "value_warmup": 4},
}


class HorizonPhase(Section):
    """ScalingInter-RL: a turn limit held for a number of iterations (the last phase holds to the end)."""

    turns: PositiveInt = Field(description="turn limit of training rollouts (at most each environment's own)")
    iterations: PositiveInt | None = Field(None, description="iterations this phase lasts; null: the rest")


class RLParams(Section):
    """Multi-turn policy-gradient training from an agent (`gymflow.train.pg`): per iteration, K rollouts of
    each drawn train task, advantages, then clipped policy-gradient steps. Rollouts sample in process with
    `evaluate`'s reply and sequence lengths and batch size."""

    start: str = Field("sft", description="the agent under data/models RL starts from (sft, evol<i>)")
    algorithm: Literal[tuple(PRESETS)] = "loop"  # type: ignore[valid-type]
    switches: dict[str, object] = Field({}, description="overrides of the preset's switches (PGSwitches)")
    tasks: dict[str, PositiveInt] = Field(
        min_length=1, description="environment -> train tasks per iteration"
    )
    samples: int = Field(6, ge=2, description="rollouts per task (K; LOOP 6, AgentGym-RL 8)")
    iterations: PositiveInt = 10
    horizon: Literal["fixed"] | list[HorizonPhase] = Field(
        "fixed", description="fixed: each environment's own turn limit; or ScalingInter-RL's phases"
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature (LOOP, AgentGym-RL: 1.0)")
    early_stop: float | None = Field(
        None, gt=0, le=1, description="stop collecting at this fraction of rollouts (and 4 per task)"
    )
    lr: float = Field(1e-4, gt=0)
    warmup: int = Field(
        8, ge=0, description="optimizer steps over which the learning rate ramps up linearly from lr / warmup"
    )
    lora_rank: int = Field(0, ge=0, description="0: full fine-tuning; > 0: LoRA of that rank")
    max_tokens: PositiveInt = Field(16384, description="tokens per forward pass (a mini-batch is split)")
    seed: int = 0

    @model_validator(mode="after")
    def _check_switches(self) -> RLParams:
        try:
            self.pg()
        except ValidationError as e:
            raise ValueError(f"rl.switches: {_describe(e)}") from None
        if isinstance(self.horizon, list) and any(p.iterations is None for p in self.horizon[:-1]):
            raise ValueError("rl.horizon: every phase but the last needs its `iterations`")
        return self

    def pg(self) -> PGSwitches:
        """The algorithm's switches with `switches` over them."""
        return PGSwitches.model_validate({**PRESETS[self.algorithm], **self.switches})

    def turn_limit(self, iteration: int) -> int | None:
        """The ScalingInter-RL turn limit of `iteration` (1-based); None: each environment's own."""
        if self.horizon == "fixed":
            return None
        end = 0
        for phase in self.horizon:
            end += phase.iterations or self.iterations
            if iteration <= end:
                return phase.turns
        return self.horizon[-1].turns


class Params(Section):
    envs: list[str] = Field(min_length=1)
    instructions: InstructionsConfig
    trajectories: TrajectoriesConfig
    model: ModelConfig = ModelConfig()
    sft: SFTParams | None = None
    evaluate: EvalParams | None = None
    evol: EvolParams | None = None
    rl: RLParams | None = None

    @model_validator(mode="after")
    def _check_envs(self) -> Params:
        unknown = [e for e in self.envs if e not in ENVS]
        if unknown:
            raise ValueError(f"unknown environment(s) {unknown} in envs; registered: {sorted(ENVS)}")
        for name, sizes in [
            ("instructions.train", self.instructions.train),
            ("instructions.eval", self.instructions.eval),
            ("trajectories.tasks", self.trajectories.tasks),
        ]:
            missing = [e for e in self.envs if e not in sizes]
            if missing:
                raise ValueError(f"{name} has no size for {missing}; add `{missing[0]}: <n>` under {name}")
            negative = [e for e, n in sizes.items() if n < 0]
            if negative:
                raise ValueError(f"{name} sizes must be >= 0, got {negative}")
        for name, section in [
            ("sft.envs", self.sft),
            ("evaluate.envs", self.evaluate),
            ("evol.tasks", self.evol),
            ("rl.tasks", self.rl),
        ]:
            envs = section and (section.tasks if name.endswith(".tasks") else section.envs)
            if envs and (outside := [e for e in envs if e not in self.envs]):
                raise ValueError(
                    f"{name} has {outside}, which are not in envs; add them to envs or drop them"
                )
        too_many = [e for e in self.envs if self.trajectories.tasks[e] > self.instructions.train[e]]
        if too_many:
            raise ValueError(
                f"trajectories.tasks exceeds instructions.train for {too_many}; lower it or raise train"
            )
        return self


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} not found: run from the repository root, or pass the path to params.yaml")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        raise UserError(f"{path}: {_describe(e)}") from None
