"""Typed parameters, validated from params.yaml: unknown keys and bad values are one-line errors.

Numbers are strict (`true` is not 1, `"8"` is not 8; an int is accepted where a float is meant), duplicate keys
are errors, and instruction sets are bounded by what each environment can make (`gymflow.env_names`). This
module imports no environment, so checking params is quick (the `params` stage runs it before every other).

Names: a `*Params` is a section of params.yaml as written; a `*Config` is what one component is built or run
from: the model (`ModelConfig`), one critic (`CriticConfig`: `sweet.critic` with its entry in `sweet.critics`,
`SweetParams.critic_config`), one AgentEvol iteration (`EvolConfig`: `evol` with its entry in `evol.iterations`,
`EvolParams.at`), and outside this module sampling (`SamplingConfig.from_rollout`) and the learner
(`LearnerConfig`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gymflow import paths
from gymflow.env_names import DEMONSTRATORS, ENV_NAMES, VIEWS, over_limit
from gymflow.errors import UserError

# Episodes per task (pass@k's k, AgentEvol's and RL's K): published settings use 1 to 64. The bound keeps a typo
# from queueing billions of episodes that fill memory before the first one plays.
MAX_SAMPLES = 1_000

# Ceilings on the other sizes, each far above the largest published setting, so that a slip (a zero too many,
# 1e9) is a one-line error naming the key instead of an allocation that takes the machine down. Whether the
# model built from them fits this machine's memory is `check_machine`'s question (the params stage asks it).
MAX_VOCAB = 1 << 20  # published vocabularies: 32k (Llama 2) to 256k (Gemma)
MAX_WIDTH = 1 << 16  # hidden_size (16,384 in Llama 3.1 405B), and a LoRA rank, at most the width it adapts
MAX_INTERMEDIATE = 1 << 18  # 53,248 in Llama 3.1 405B
MAX_LAYERS = 1 << 10  # 126 in Llama 3.1 405B
MAX_TOKENS = 1 << 20  # positions, lengths and ids per forward pass: 1M in Qwen2.5-1M, the longest context
MAX_BATCH = 1 << 16  # episodes or pairs per batch: published SFT, DPO and rollout batches are 8 to 4,096
MAX_WORKERS = 1 << 10  # Ray workers, each a process holding a policy


class Section(BaseModel):
    # allow_inf_nan: `.inf` and `.nan` are YAML floats; no rate, weight or temperature means anything at either
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class InstructionsParams(Section):
    """Per environment, how many tasks each split holds. Train and eval never share a task."""

    seed: int = 0
    train: dict[str, NonNegativeInt] = Field(
        description="train tasks per environment (AgentGym: hundreds to thousands)"
    )
    eval: dict[str, NonNegativeInt] = Field(
        description="held-out AgentEval tasks per environment (AgentGym: 25-200)"
    )
    views: dict[str, str] = Field(
        default_factory=dict, description="environment -> observation format its tasks are shown in"
    )

    @field_validator("views")
    @classmethod
    def _known_views(cls, views: dict[str, str]) -> dict[str, str]:
        for env, view in views.items():
            if view not in VIEWS.get(env, ()):
                have = f"views {list(VIEWS[env])}" if env in VIEWS else "no choice of view"
                raise ValueError(f"{env}: {view!r} is not a view; it has {have}")
        return views


class TrajectoriesParams(Section):
    """AgentTraj: how many train tasks per environment the demonstrator plays (the rest is left to exploration)
    and, per environment, which demonstrator: "expert" (the default) or an imperfect one the game offers."""

    tasks: dict[str, NonNegativeInt]
    demonstrators: dict[str, str] = Field(default_factory=dict)

    @field_validator("demonstrators")
    @classmethod
    def _known_demonstrators(cls, chosen: dict[str, str]) -> dict[str, str]:
        for env, kind in chosen.items():
            if kind not in DEMONSTRATORS.get(env, ("expert",)):
                raise ValueError(
                    f"{env}: no demonstrator {kind!r}; it has {list(DEMONSTRATORS.get(env, ('expert',)))}"
                )
        return chosen


class ModelConfig(Section):
    """The initial policy. `name_or_path` names a model (local directory or Hub id) used unchanged; when it is
    null, a byte-level BPE tokenizer and a small Qwen2-style decoder are built from the sizes below."""

    name_or_path: str | None = None
    seed: int = 0
    vocab_size: int = Field(
        2048, ge=300, le=MAX_VOCAB, description="BPE vocabulary, special tokens included (>= 256 bytes)"
    )
    hidden_size: int = Field(128, ge=8, le=MAX_WIDTH)
    intermediate_size: int = Field(512, ge=8, le=MAX_INTERMEDIATE)
    layers: int = Field(2, ge=1, le=MAX_LAYERS)
    heads: int = Field(4, ge=1)  # at most hidden_size, which it divides
    kv_heads: int = Field(4, ge=1)  # at most heads, which it divides
    max_length: int = Field(
        4096, ge=64, le=MAX_TOKENS, description="longest sequence (positions) the model handles"
    )

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
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="episodes per step")
    warmup: float = Field(0.05, ge=0, description="warm-up: a fraction of the steps (< 1) or a step count")
    max_length: int = Field(2048, ge=64, le=MAX_TOKENS, description="longer episodes are truncated")
    bf16: bool | Literal["auto"] = Field(
        "auto",
        description="bf16 autocast; auto: where the hardware computes bf16 natively (without it, CPU autocast "
        "emulates bf16 and trains 12x slower than fp32 on an AVX2-only CPU)",
    )
    lora_rank: int = Field(
        0, ge=0, le=MAX_WIDTH, description="0: full fine-tuning (the tiny default); > 0: LoRA of that rank"
    )
    processes: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="training processes on a CPU, one thread each, data-parallel (the same result as one); auto: "
        "one per core without a GPU, one with a GPU (several GPUs: accelerate launch)",
    )
    activation_checkpointing: bool = Field(
        False,
        description="recompute each layer's activations in the backward pass: less memory for a large model or "
        "long episodes, at the cost of a second forward pass (TRL's default; the tiny default does not need it)",
    )
    seed: int = 0
    log_every: int = Field(10, ge=1)

    @field_validator("bf16", mode="before")
    @classmethod
    def _bf16_choice(cls, value: object) -> object:
        if value is not True and value is not False and value != "auto":  # 1 == True, yet 1 is no precision
            raise ValueError(f"{value!r} is not a precision: use true, false or auto")
        return value


PLACEMENT = {"servers", "env_servers", "engine", "workers", "ray_address"}  # where episodes play, not what


class RolloutParams(Section):
    """How episodes are played, whoever plays them (evaluation, AgentEvol's exploration, RL): its own section,
    so that a change to evaluation alone does not rerun the stages that train."""

    max_new_tokens: int = Field(
        96, ge=1, le=MAX_TOKENS, description="per reply; must exceed the longest thought"
    )
    max_length: int = Field(4096, ge=64, le=MAX_TOKENS)
    batch_size: int = Field(32, ge=1, le=MAX_BATCH, description="episodes sharing one generation batch")
    servers: dict[str, str | list[str]] = Field(
        {},
        description="policy -> base URL of an OpenAI-compatible server (vLLM, `gymflow serve-model`) that "
        "samples for it, or a list of them (Ray worker i uses the i-th, cycling); others sample in process",
    )
    env_servers: dict[str, list[str]] = Field(
        {},
        description="environment -> base URLs of `gymflow serve-env` servers its episodes play on, round-robin; "
        "other environments play in process",
    )
    engine: Literal["local", "ray"] = Field(
        "local",
        description="local: this process plays every episode; ray: whole batches spread over Ray workers",
    )
    workers: int = Field(
        2, ge=1, le=MAX_WORKERS, description="Ray workers (engine: ray), one CPU (or GPU) each"
    )
    ray_address: str | None = Field(
        None, description="the Ray cluster to join (auto, ray://host:10001); null: start one on this machine"
    )

    @field_validator("servers", "env_servers")
    @classmethod
    def _urls(cls, value: dict, info) -> dict:
        for key, urls in value.items():
            for url in [urls] if isinstance(urls, str) else urls:
                if not str(url).startswith(("http://", "https://")):
                    raise ValueError(f"{key}: {url!r} is not an http(s):// URL")
            if not urls:
                raise ValueError(f"{key}: give at least one URL")
        if info.field_name == "env_servers" and (unknown := [e for e in value if e not in ENV_NAMES]):
            raise ValueError(f"unknown environment(s) {unknown}; registered: {sorted(ENV_NAMES)}")
        return value

    def server_for(self, policy: str, worker: int = 0) -> str | None:
        """The completion server that samples for `policy` (worker `worker`'s, when there are several)."""
        urls = self.servers.get(policy)
        if urls is None or isinstance(urls, str):
            return urls
        return urls[worker % len(urls)]


class EvalParams(Section):
    """AgentEval: a policy plays the eval split greedily, and k more times sampled for pass@k, as `rollout`
    says. Which policies are evaluated is the stage list in dvc.yaml (`evaluate@init`, `evaluate@sft`,
    `evaluate_evol@<iteration>`)."""

    envs: list[str] = Field(min_length=1)
    k: int = Field(
        0, ge=0, le=MAX_SAMPLES, description="sampled episodes per task for pass@k; 0: greedy only"
    )
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0
    limit: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="policy -> at most this many held-out tasks per environment (a prefix of the eval split, "
        "whose order interleaves the difficulties); absent: all",
    )
    derived: Literal["trained", "all"] = Field(
        "trained",
        description="where the agents trained from the SFT agent play (rl, control, AgentEvol's iterations): "
        "trained: the environments of evaluate.envs they learned on (rl.tasks, evol.tasks); all: every one, "
        "to see what they forget elsewhere",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_to_rollout(cls, value: object) -> object:
        """A params.yaml from before `rollout:` had its own section names where each key went."""
        moved = [key for key in RolloutParams.model_fields if isinstance(value, dict) and key in value]
        if moved:
            old, new = (", ".join(f"{section}.{key}" for key in moved) for section in ("evaluate", "rollout"))
            raise ValueError(
                f"{old} moved to {new}: put {'it' if len(moved) == 1 else 'them'} under `rollout:`"
            )
        return value


class EvolConfig(Section):
    """One AgentEvol iteration (AgentGym Algorithm 1): explore, keep what succeeded, learn."""

    tasks: dict[str, PositiveInt | None] = Field(
        min_length=1,
        description="environment -> train tasks explored per iteration (a fresh seeded draw); null: all of them",
    )
    samples: PositiveInt = Field(1, le=MAX_SAMPLES, description="episodes per task (K)")
    temperature: float = Field(0.7, gt=0)
    threshold: float = Field(
        0.0, description="keep explored episodes that succeeded with reward >= threshold"
    )
    keep: Literal["all", "shortest"] = Field(
        "all", description="every kept episode, or per task the one of fewest turns (ties: lowest sample)"
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


class EvolParams(EvolConfig):
    """AgentEvol and its variants: rejection fine-tuning is one iteration from the SFT agent without merging,
    expert iteration continues from the last agent (`learn_from: last`)."""

    iterations: dict[str, Iteration] = Field(min_length=1, description="name -> iteration, in order (M)")

    def at(self, name: str) -> EvolConfig:
        """The settings of iteration `name`: the shared ones with its overrides."""
        if name not in self.iterations:
            raise ValueError(f"no iteration {name!r} in evol.iterations (have {list(self.iterations)})")
        shared = self.model_dump(exclude={"iterations"})
        overrides = self.iterations[name].model_dump(exclude={"explorer"})
        return EvolConfig.model_validate({**shared, **overrides})

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
                raise ValueError(f"evol.iterations.{name}: {describe_error(e)}") from None
            seen.append(name)
        return self


class HorizonPhase(Section):
    """ScalingInter-RL: a turn limit held for a number of iterations (the last phase holds to the end)."""

    turns: PositiveInt = Field(description="turn limit of training rollouts (at most each environment's own)")
    iterations: PositiveInt | None = Field(None, description="iterations this phase lasts; null: the rest")


class RLParams(Section):
    """Multi-turn policy-gradient training from an agent (`gymflow.train.pg`): per iteration, K rollouts of
    each drawn train task, advantages, then clipped policy-gradient steps. Rollouts sample in process with
    `rollout`'s reply and sequence lengths and batch size."""

    start: str = Field("sft", description="the agent under data/models RL starts from (sft, evol<i>)")
    algorithm: str = Field(
        "loop",
        description="a preset of the trainer's switches (gymflow.train.presets.PRESETS: loop, grpo, ...)",
    )
    switches: dict[str, object] = Field(
        {}, description="overrides of the preset's switches (gymflow.train.presets.PGSwitches)"
    )
    tasks: dict[str, PositiveInt] = Field(
        min_length=1, description="environment -> train tasks per iteration"
    )
    difficulties: dict[str, list[str]] = Field(
        {}, description="environment -> the difficulties it trains on (LOOP: apps 1 and 2); absent: all"
    )
    samples: int = Field(6, ge=2, le=MAX_SAMPLES, description="rollouts per task (K; LOOP 6, AgentGym-RL 8)")
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
    lora_rank: int = Field(0, ge=0, le=MAX_WIDTH, description="0: full fine-tuning; > 0: LoRA of that rank")
    max_tokens: PositiveInt = Field(
        16384,
        le=MAX_TOKENS,
        description="tokens per forward pass (a mini-batch is split; a prompt its group shares counts once)",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _check_horizon(self) -> RLParams:
        if isinstance(self.horizon, list) and any(p.iterations is None for p in self.horizon[:-1]):
            raise ValueError("rl.horizon: every phase but the last needs its `iterations`")
        if outside := [env for env in self.difficulties if env not in self.tasks]:
            raise ValueError(f"rl.difficulties has {outside}, which rl.tasks does not train on; drop them")
        return self

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


# ---- SWEET-RL (sweet/dvc.yaml) ----
class CriticConfig(Section):
    """One critic; the variants of SWEET-RL's Figure 3a are its switches (`hidden`, `kind`)."""

    hidden: bool = True
    """read the task's training-time information (`Env.hidden_text`) before the interaction; False is the
    paper's "w/o training-time information" row"""
    kind: Literal["advantage", "value"] = "advantage"
    """advantage: Eq. 3 trained by Bradley-Terry (Eq. 2); value: a head predicting success, trained by BCE"""
    value_target: Literal["success", "reward"] = "success"
    """what the value head predicts (kind value): success (the paper) or the reward in [0, 1] as a soft label,
    for data where nothing succeeds (colbench's fraction of tests passed)"""
    beta: float = Field(0.1, gt=0)
    """Eq. 2's beta (the paper: 0.1); larger makes the loss saturate at smaller advantage gaps"""
    lr: float = Field(1e-5, ge=0)
    """AdamW's learning rate for the critic LM (the paper: 2e-7 on an 8B model; tiny models want 1e-5 to 1e-4)"""
    head_lr: float = Field(1e-3, ge=0)
    """the value head's learning rate (kind value; the head starts from random weights)"""
    nll_coef: float = Field(0.0, ge=0)
    """weight of the chosen episodes' mean reply NLL added to the BT loss, keeping pi_theta a language model of
    the data (the paper's Table 5 lists 0.01; its released critic command sets none)"""
    epochs: int = Field(4, ge=1)
    """passes over the pairs (advantage) or episodes (value); the paper: 4"""
    batch: int = Field(8, ge=1, le=MAX_BATCH)
    """pairs (advantage) or episodes (value) per optimizer step; the paper: 8"""
    max_pairs_per_task: int = Field(16, ge=1)
    """at most this many (chosen, rejected) pairs per task, a seeded draw: K samples of a task give up to
    K^2/4 pairs, which would let tasks with many distinct rewards dominate"""
    max_hidden_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    """the hidden block is cut to this many ids (colbench's reference: about 100)"""
    max_tokens: int = Field(16384, ge=1, le=MAX_TOKENS)
    """padded ids per forward pass: bounds activation memory, not the batch (passes accumulate)"""
    max_grad_norm: float | None = Field(1.0, gt=0)
    """gradients clipped to this norm (None: not clipped)"""
    seed: int = 0
    """seeds the pair draw, the shuffle and the value head's initial weights"""


class DPOParams(Section):
    """One DPO run: SWEET-RL's actor (per-turn pairs) or the multi-turn DPO baseline (episode pairs)."""

    beta: float = Field(0.1, gt=0)
    """Eq. 4's beta' (the paper: 0.1 for both). Larger keeps the policy closer to pi_ref: the loss saturates
    at smaller log-ratio gaps"""
    nll_coef: float = Field(0.01, ge=0)
    """weight of the chosen side's mean NLL per id (the paper: 0.01, which it found to help in most cases);
    keeps the chosen replies likely while DPO pushes the pair apart"""
    lr: float = Field(1e-4, gt=0)
    """AdamW's peak learning rate, cosine-decayed after warm-up. The paper: 2e-7 on an 8B model; the tiny
    agent's other fine-tuning runs at 3e-4 (rl) and 4e-4 (evol)"""
    epochs: float = Field(1.0, gt=0)
    """passes over the pairs, a fraction being a seeded draw (the paper: actor 1, multi-turn DPO 4)"""
    batch_size: int = Field(8, ge=1, le=MAX_BATCH)
    """pairs per optimizer step (the paper: 8)"""
    warmup: float = Field(0.05, ge=0)
    """learning-rate warm-up: a fraction of the steps (< 1) or a step count"""
    max_grad_norm: float | None = Field(1.0, gt=0)
    """gradients clipped to this norm (None: not clipped; OpenRLHF clips at 1.0)"""
    max_tokens: int = Field(16384, ge=1, le=MAX_TOKENS)
    """padded ids per forward pass: bounds activation memory, not the batch (passes accumulate)"""
    lora_rank: int = Field(0, ge=0, le=MAX_WIDTH)
    """0: full fine-tuning (the tiny default); > 0: LoRA of that rank (large models)"""
    seed: int = 0
    """seeds the shuffle (and LoRA's initial adapters)"""
    log_every: int = Field(10, ge=1)
    """optimizer steps per curve row"""


class CandidateParams(Section):
    """How SWEET-RL's per-turn pairs are made (section 4.3)."""

    candidates: int = Field(16, ge=2, le=MAX_SAMPLES)
    """replies sampled per turn (the paper: 16); more gives the halves more room, at a proportional cost"""
    pairs_per_turn: int = Field(1, ge=1)
    """distinct (chosen, rejected) draws per turn (the paper's text: 1; its released script: 4)"""
    turns: int | None = Field(None, ge=1)
    """a seeded draw of this many turns of the offline data (None: all; SWEET-RL's script samples a tenth)"""
    temperature: float = Field(1.0, gt=0)
    """the policy's sampling temperature (the paper: 1.0); the offline data's, so candidates are its draws"""
    seed: int = 0
    """seeds the draw of turns, each part's sampling and each turn's pair draw"""


class OfflineParams(Section):
    """The offline data every SWEET-RL method learns from (paper 003, section 5.1: zero-shot episodes of the
    agent on train tasks, several per task)."""

    tasks: PositiveInt = Field(description="train tasks drawn (a seeded draw)")
    samples: int = Field(4, ge=2, le=MAX_SAMPLES, description="episodes per task: pairs need two")
    temperature: float = Field(1.0, gt=0)


class ActorParams(CandidateParams):
    """SWEET-RL's actor: per-turn candidates from the agent, ranked by one of `sweet.critics`."""

    critic: str = Field("hidden", description="the name in sweet.critics whose scores rank the candidates")


class MultiTurnDPOParams(DPOParams):
    """The multi-turn DPO baseline: whole episodes of a task, the higher reward chosen."""

    max_pairs_per_task: PositiveInt = 4


class RFTParams(Section):
    """Rejection fine-tuning: SFT (sft's settings, this lr) on the offline episodes that succeeded (or reached
    `min_reward`)."""

    epochs: float = Field(1.0, gt=0, description="passes over the kept episodes")
    lr: float = Field(1e-4, gt=0)
    min_reward: float | None = Field(
        None, description="keep episodes with reward >= min_reward; null: those that succeeded (the paper)"
    )


class BestOfNParams(Section):
    """Figure 3a: at each turn N candidates from the agent, the one a critic (or chance) picks is executed."""

    ns: list[Annotated[int, Field(ge=1, le=MAX_SAMPLES)]] = Field([1, 2, 4, 8, 16], min_length=1)
    tasks: PositiveInt = Field(description="held-out tasks played (the first of the eval split)")
    temperature: float = Field(1.0, gt=0)


class SweetParams(Section):
    """SWEET-RL and its baselines on one environment whose tasks carry hidden information (sweet/dvc.yaml)."""

    env: str = "colbench"
    start: str = Field("sft", description="the agent under data/models that collects and is trained")
    seed: int = Field(0, description="seeds every draw: offline tasks and samples, critics, candidates, DPO")
    offline: OfflineParams
    critic: CriticConfig = CriticConfig()
    critics: dict[str, dict[str, object]] = Field(
        min_length=1, description="name -> overrides of `critic`: the variants trained and compared"
    )
    actor: ActorParams = ActorParams()
    dpo: DPOParams = DPOParams()
    mtdpo: MultiTurnDPOParams = MultiTurnDPOParams()
    rft: RFTParams = RFTParams()
    best_of_n: BestOfNParams

    @model_validator(mode="after")
    def _check(self) -> SweetParams:
        for name in self.critics:
            self.critic_config(name)
        if self.actor.critic not in self.critics:
            raise ValueError(
                f"sweet.actor.critic is {self.actor.critic!r}, not one of sweet.critics {sorted(self.critics)}"
            )
        return self

    def critic_config(self, name: str) -> CriticConfig:
        """Critic `name`: `critic` with its overrides, seeded by `seed`."""
        try:
            return CriticConfig(**(self.critic.model_dump() | self.critics[name] | {"seed": self.seed}))
        except ValidationError as e:
            raise ValueError(f"sweet.critics.{name}: {describe_error(e)}") from None

    def seeded(self, section: Section) -> Section:
        return section.model_copy(update={"seed": self.seed})


class Params(Section):
    envs: list[str] = Field(min_length=1)
    instructions: InstructionsParams
    trajectories: TrajectoriesParams
    model: ModelConfig = ModelConfig()
    sft: SFTParams | None = None
    rollout: RolloutParams = RolloutParams()
    evaluate: EvalParams | None = None
    evol: EvolParams | None = None
    rl: RLParams | None = None
    sweet: SweetParams | None = None

    @model_validator(mode="after")
    def _check_envs(self) -> Params:
        unknown = [e for e in self.envs if e not in ENV_NAMES]
        if unknown:
            raise ValueError(f"unknown environment(s) {unknown} in envs; registered: {sorted(ENV_NAMES)}")
        for name, sizes in [
            ("instructions.train", self.instructions.train),
            ("instructions.eval", self.instructions.eval),
            ("trajectories.tasks", self.trajectories.tasks),
        ]:
            missing = [e for e in self.envs if e not in sizes]
            if missing:
                raise ValueError(f"{name} has no size for {missing}; add `{missing[0]}: <n>` under {name}")
        for env in self.envs:
            train, held_out = self.instructions.train[env], self.instructions.eval[env]
            if over := over_limit(env, train, held_out):
                part, limit = over
                asked = f"instructions.{part}.{env} is {train if part == 'train' else held_out:,}"
                if part == "total":
                    asked = f"instructions.train.{env} + instructions.eval.{env} is {train + held_out:,}"
                kind = "tasks" if part == "total" else f"{part} tasks"
                raise ValueError(
                    f"{asked}, more than the {limit:,} {kind} {env} can make (gymflow/env_names.py); lower it"
                )
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
        agents = ["init", "sft", *(self.evol.iterations if self.evol else [])]
        if self.rl and self.rl.start not in agents:
            raise ValueError(f"rl.start is {self.rl.start!r}; use one of the agents {agents}")
        if self.sweet and self.sweet.start not in agents:
            raise ValueError(f"sweet.start is {self.sweet.start!r}; use one of the agents {agents}")
        if self.sweet and self.sweet.env not in self.envs:
            raise ValueError(f"sweet.env {self.sweet.env!r} is not in envs; add it to envs")
        if self.rl and self.rl.early_stop and self.rollout.engine == "ray":
            raise ValueError(
                "rl.early_stop needs rollout.engine local (Ray workers play whole batches); drop one"
            )
        return self

    def evaluated_envs(self, policy: str) -> list[str]:
        """The environments of evaluate.envs that `policy` plays (`evaluate.derived`): RL's agent where it
        trained, AgentEvol's iterations and their control where AgentEvol explored; any other agent all of them.
        Playing a derived agent on environments it never trained on costs more of the CPU default's time than
        anything but SFT (4 policies x 3-4 minutes), and its comparisons are where it trained."""
        envs = self.evaluate.envs if self.evaluate else []
        trained: set[str] | None = None
        if self.evaluate and self.evaluate.derived == "trained":
            if policy == "rl" and self.rl:
                trained = set(self.rl.tasks)
            elif self.evol and policy in ("control", *self.evol.iterations):
                trained = set(self.evol.tasks)  # the shared tasks (dvc.yaml's dependency), not an iteration's
        return [e for e in envs if trained is None or e in trained]


# ---- what params.yaml names must be on this machine, and what it builds must fit here ----
BUILD_BYTES = 4  # a parameter in fp32, as init_model builds the decoder in RAM
TRAIN_BYTES = 16  # a fully fine-tuned parameter: fp32 weights, gradients and AdamW's two moments
# what a parameter count grows with; and the files a tokenizer loads from (fast, SentencePiece, BPE, WordPiece)
MODEL_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "layers")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def check_machine(params: Params) -> None:
    """The params stage's checks of this machine: `init_model` only records a named model, so a missing one
    failed at SFT, and a built model too big for memory failed there; both after DVC deleted their outputs."""
    if params.model.name_or_path:
        check_model_source(params.model.name_or_path)
    else:
        check_model_fits(params.model, full=params.sft is not None and params.sft.lora_rank == 0)


def check_model_source(name: str) -> None:
    """`model.name_or_path` must load without a download: a directory holding config.json and a tokenizer, or
    a Hub id already in the local Hugging Face cache."""
    path = Path(name).expanduser()
    if path.exists() or name.startswith(("/", ".", "~", f"{paths.DATA}/")) or name.count("/") > 1:
        check_model_dir(name, path)
    elif not _in_hub_cache(name):
        from huggingface_hub.constants import HF_HUB_CACHE

        raise UserError(
            f"model.name_or_path {name!r} is neither a directory nor a model in the local Hugging Face cache "
            f"({HF_HUB_CACHE}), and nothing is downloaded at run time: fetch it first (hf download {name}) "
            "or name a model directory"
        )


def check_model_dir(name: str, path: Path) -> None:
    """A model directory: config.json (what from_pretrained builds) and one tokenizer file."""
    if not path.is_dir():
        hint = (
            " (build it: python -m gymflow.models.pretrained data/models/smollm2)"
            if "smollm2" in name
            else ""
        )
        raise UserError(f"model.name_or_path {name} is not a directory{hint}")
    if not (path / "config.json").is_file():
        raise UserError(
            f"model.name_or_path {name} holds no config.json: name a Hugging Face model directory"
        )
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise UserError(f"model.name_or_path {name} holds no tokenizer (one of {', '.join(TOKENIZER_FILES)})")


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the Hub model `repo_id` has its config.json and a tokenizer file in the local cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = [
            isinstance(try_to_load_from_cache(repo_id, f), str) for f in ("config.json", *TOKENIZER_FILES)
        ]
    except HFValidationError:  # not a Hub id at all
        return False
    return cached[0] and any(cached[1:])


def parameters(cfg: ModelConfig) -> int:
    """The built decoder's parameter count (gymflow.models.build: Qwen2, tied embeddings, q/k/v biases) at the
    full `vocab_size` its tokenizer is trained to."""
    kv = cfg.kv_heads * (cfg.hidden_size // cfg.heads)
    attention = cfg.hidden_size * (2 * cfg.hidden_size + 2 * kv) + cfg.hidden_size + 2 * kv
    layer = attention + 3 * cfg.hidden_size * cfg.intermediate_size + 2 * cfg.hidden_size
    return cfg.vocab_size * cfg.hidden_size + cfg.layers * layer + cfg.hidden_size


def check_model_fits(cfg: ModelConfig, full: bool) -> None:
    """Refuse a built model whose parameters alone exceed this machine's memory, naming the size most out of
    proportion to the default and its largest value that fits with the others as given."""
    over = memory_shortfall(cfg, full)
    if over is None:
        return
    need, have, why = over
    defaults = ModelConfig()
    key = max(MODEL_SIZES, key=lambda k: getattr(cfg, k) / getattr(defaults, k))
    limit = largest_fitting(cfg, key, full)
    advice = f"at most {limit:,}" if limit else "fits at no value"
    raise UserError(
        f"model.{key} {getattr(cfg, key):,} makes a {parameters(cfg):.3g}-parameter model; {why}, {_gib(need)}, "
        f"more than this machine's {_gib(have)}: model.{key} {advice} with the other sizes as given"
    )


def largest_fitting(cfg: ModelConfig, key: str, full: bool) -> int | None:
    """The largest `key` from its minimum up to its value in `cfg` at which the model fits (bisected: the count
    grows with each size); None where even the minimum does not."""

    def fits(value: int) -> bool:
        return memory_shortfall(cfg.model_copy(update={key: value}), full) is None

    low = next(m.ge for m in ModelConfig.model_fields[key].metadata if hasattr(m, "ge"))
    high = getattr(cfg, key)
    if not fits(low):
        return None
    while high - low > 1:  # fits(low) and not fits(high)
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def memory_shortfall(cfg: ModelConfig, full: bool) -> tuple[int, int, str] | None:
    """(bytes needed, bytes there, what for) of the first memory a model of `cfg` cannot fit; None if it fits
    (or this system does not say how much memory it has)."""
    ram = ram_bytes()
    if ram is None:
        return None
    count = parameters(cfg)
    if count * BUILD_BYTES > ram:
        return count * BUILD_BYTES, ram, f"building it in RAM takes {BUILD_BYTES} bytes a parameter (fp32)"
    if full and count * TRAIN_BYTES > ram and count * TRAIN_BYTES > largest_gpu_bytes():
        why = f"fine-tuning all of it (sft.lora_rank 0) takes {TRAIN_BYTES} bytes a parameter (fp32 weights, "
        return count * TRAIN_BYTES, max(ram, largest_gpu_bytes()), why + "gradients, AdamW's two moments)"
    return None


def ram_bytes() -> int | None:
    """This machine's physical memory; None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


@functools.cache
def largest_gpu_bytes() -> int:
    """The memory of this machine's largest GPU (0: none). Asked only when RAM is too small: torch takes
    seconds to import, which the params check otherwise never pays."""
    import torch

    if not torch.cuda.is_available():
        return 0
    return max(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))


def _gib(size: int) -> str:
    return f"{size / 2**30:,.1f} GiB"


def describe_error(err: ValidationError) -> str:
    """The first error as `where: what`, with the value given when it is a plain one (`got true`)."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"] if not _is_union_member(p))
    msg = first["msg"].removeprefix("Value error, ")
    value = first.get("input")
    plain = isinstance(value, str | int | float | bool | None)
    if plain and first["type"] not in ("value_error", "extra_forbidden", "missing"):
        msg += f", got {json.dumps(value)}"
    if not where or msg.startswith((f"{where}.", f"{where}:")):  # a validator's message names its place
        return msg
    return f"{where}: {msg}"


def _is_union_member(part: object) -> bool:
    """Pydantic names the member of a union that failed in an error's place: `int`, `literal['fixed']`."""
    return isinstance(part, str) and (
        part in {"int", "float", "bool", "str", "none"} or "[" in part or "-" in part
    )


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with a duplicate key an error (safe_load keeps the last one silently) and 1e9 or
    2e-3 read as numbers, as YAML 1.2 and DVC read them (PyYAML's YAML 1.1 wants a dot: 1.0e9)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        lines: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in lines:
                raise _DuplicateKey(
                    f"line {line}: duplicate key {key!r} (first on line {lines[key]}); keep one"
                )
            lines[key] = line
        return super().construct_mapping(node, deep)


class _DuplicateKey(yaml.YAMLError):
    pass


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} not found: run from the repository root, or pass the path to params.yaml")
    try:
        raw = yaml.load(path.read_text(), Loader=_Loader) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path} cannot be read: {e}") from None
    except _DuplicateKey as e:
        raise UserError(f"{path} {e}") from None
    except yaml.MarkedYAMLError as e:
        where = f" line {e.problem_mark.line + 1}:" if e.problem_mark else ""
        raise UserError(f"{path} is not valid YAML:{where} {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        raise UserError(f"{path}: {describe_error(e)}") from None
