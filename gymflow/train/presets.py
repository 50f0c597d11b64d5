"""The policy-gradient trainer's switches, and the algorithms as presets of them (LOOP Table 1; AgentGym-RL
3.2.2). They live beside the trainer, not in `gymflow.config`, so that editing a preset reruns the stages that
train with it (`rl`) and not every stage that reads params.yaml.

    switches(params.rl)   # rl.algorithm's preset with rl.switches over it, checked
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, ValidationError, model_validator

from gymflow.config import RLParams, Section, describe_error
from gymflow.errors import UserError


class PGSwitches(Section):
    """The switches of the policy-gradient trainer (`gymflow.train.pg`); each algorithm is a preset of them."""

    # the names of `advantages.EPISODE_ADVANTAGES`, and gae (a test keeps the two in step)
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


def switches(rl: RLParams) -> PGSwitches:
    """`rl.algorithm`'s preset with `rl.switches` over it; a bad name or switch is a one-line error."""
    if rl.algorithm not in PRESETS:
        raise UserError(
            f"params.yaml: rl.algorithm {rl.algorithm!r} is not a preset; one of {', '.join(PRESETS)}"
        )
    try:
        return PGSwitches.model_validate({**PRESETS[rl.algorithm], **rl.switches})
    except ValidationError as e:
        raise UserError(f"params.yaml: rl.switches: {describe_error(e)}") from None
