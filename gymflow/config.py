"""Typed parameters, validated from params.yaml: unknown keys and bad values are one-line errors."""

from __future__ import annotations

from pathlib import Path

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
    bf16: bool = True
    lora_rank: int = Field(
        0, ge=0, description="0: full fine-tuning (the tiny default); > 0: LoRA of that rank"
    )
    seed: int = 0
    log_every: int = Field(10, ge=1)


class EvalParams(Section):
    """AgentEval: each policy plays the eval split greedily, and k more times sampled for pass@k."""

    policies: list[str] = Field(
        ["init", "sft"], min_length=1, description="model directories under data/models"
    )
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

    @model_validator(mode="after")
    def _check_servers(self) -> EvalParams:
        unknown = sorted(set(self.servers) - set(self.policies))
        if unknown:
            raise ValueError(f"evaluate.servers names {unknown}, which are not in evaluate.policies")
        return self


class Params(Section):
    envs: list[str] = Field(min_length=1)
    instructions: InstructionsConfig
    trajectories: TrajectoriesConfig
    model: ModelConfig = ModelConfig()
    sft: SFTParams | None = None
    evaluate: EvalParams | None = None

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
        for name, section in [("sft", self.sft), ("evaluate", self.evaluate)]:
            if section and (outside := [e for e in section.envs if e not in self.envs]):
                raise ValueError(
                    f"{name}.envs has {outside}, which are not in envs; add them to envs or drop them"
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
