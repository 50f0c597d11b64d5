"""Typed parameters, validated from params.yaml: unknown keys and bad values are one-line errors."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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


class Params(Section):
    envs: list[str] = Field(min_length=1)
    instructions: InstructionsConfig
    trajectories: TrajectoriesConfig

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
