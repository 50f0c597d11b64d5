"""SWEET-RL's actor data (paper 003, section 4.3) and the two baselines' data, from the same offline episodes.

The offline episodes are a rollout folder read token for token, each with its task's hidden text
(`gymflow.train.critic.critic_episodes`); the three methods train on exactly that data:

- SWEET-RL (`build_turn_pairs`): each reply of each episode is a turn. Given the turn's context (the policy's
  ids before the reply, exactly as it saw them), `candidates` replies (the paper: 16) are sampled from the
  current policy at its temperature (`gymflow.models.sampling.sample`, the context repeated), the critic
  scores each with the task's hidden text (`TurnCritic.score`; the policy never sees that text), and
  `half_pairs` draws the chosen reply from the top half by score and the rejected one from the bottom half.
  Pairs keep the ids as sampled and are stored with every candidate's score (`PAIRS_SCHEMA`); DPO trains on
  them as one-reply pairs (`gymflow.train.dpo.Pair.reply`).
- multi-turn DPO (`episode_pairs`): two episodes of one task, the higher reward chosen (the critic's own pair
  construction, `preference_pairs`: ties skipped, capped per task, seeded), every reply of each counted.
- rejection fine-tuning (`rft_rows`): the successful episodes, token for token, as SFT rows (`learning_set`),
  for `gymflow.train.sft.train_sft`.

Sampling candidates is the slow part (16 replies per turn), so `build_turn_pairs` works in parts of
`PART_TURNS` turns, each sampled from its own seeded generator and written whole beside the output: a stopped
run keeps its finished parts and ends with the table of a run that never stopped.

    episodes = critic_episodes("data/rollouts/offline", "data", fmt)
    sampling = SamplingConfig.from_rollout(params.rollout, temperature=CandidateParams().temperature)
    build_turn_pairs(policy, fmt, load_critic("data/models/critic"), episodes, CandidateParams(), sampling,
                     Path("data/sweet/pairs.parquet"), critic_id)
    pairs = read_turn_pairs(Path("data/sweet/pairs.parquet"))              # -> gymflow.train.dpo.train_dpo
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from transformers import PreTrainedModel

from gymflow.agent.chat import ChatFormat
from gymflow.config import CandidateParams
from gymflow.envs.base import task_rng
from gymflow.errors import UserError
from gymflow.models.files import checkpoint_dir, weights_hash
from gymflow.models.sampling import sample
from gymflow.progress import bar as progress_bar
from gymflow.rollout.engine import SamplingConfig
from gymflow.rollout.records import config_hash
from gymflow.store.io import rebuild_hint, write_table
from gymflow.train.critic import CriticEpisode, CriticItem, preference_pairs
from gymflow.train.dpo import Pair
from gymflow.train.draws import iteration_seed
from gymflow.train.evol import Row, learning_set

PART_TURNS = 64  # turns per part file: the work a stopped run keeps
SECONDS_KEY = b"gymflow.seconds"  # in a part file's footer: its sampling and scoring seconds and ids sampled

PAIRS_SCHEMA = pa.schema(
    [
        ("env", pa.string()),
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        (
            "turn",
            pa.int32(),
        ),  # the reply's message index: the `turn` of the turns table (join on episode_id, turn)
        ("reply", pa.int32()),  # the reply's number in its episode (1, 2, ...)
        ("pair", pa.int32()),  # the pair's number among this turn's pairs (0, 1, ...)
        ("candidates", pa.int32()),  # replies sampled for the turn
        ("scores", pa.list_(pa.float64())),  # the critic's score of each candidate, in sampling order
        ("chosen", pa.int32()),  # the chosen candidate's index among them
        ("rejected", pa.int32()),
        ("chosen_score", pa.float64()),
        ("rejected_score", pa.float64()),
        ("prompt_ids", pa.list_(pa.int32())),  # the turn's context, as the policy saw it
        ("chosen_ids", pa.list_(pa.int32())),  # exactly as sampled: the ids DPO trains on
        ("rejected_ids", pa.list_(pa.int32())),
        ("chosen_text", pa.string()),  # decoded, for reading the table
        ("rejected_text", pa.string()),
    ]
)


class Critic(Protocol):
    """What the actor needs of a critic (`TurnCritic`): one score per turn, higher is better."""

    def score(self, items: Sequence[CriticItem]) -> list[float]: ...


@dataclass(frozen=True)
class Turn:
    """One reply of an offline episode: what the policy saw before it."""

    episode: CriticEpisode
    reply: int  # its number in the episode (1, 2, ...)
    context: list[int]  # the policy's ids before the reply, exactly as it saw them

    @property
    def turn(self) -> int:
        """Its message index (the turns table's `turn`)."""
        return self.episode.message_index[self.reply - 1]


def replies_in_context(episodes: Sequence[CriticEpisode]) -> list[Turn]:
    """Every reply of every episode, in order, with its context."""
    return [
        Turn(e, reply, e.ids[: e.turns.index(reply)]) for e in episodes for reply in range(1, e.replies + 1)
    ]


# ---- pair construction: pure, tested by hand ---------------------------------------------------------------
def half_pairs(scores: Sequence[float], k: int, rng: random.Random) -> list[tuple[int, int]]:
    """Up to `k` distinct (chosen, rejected) candidate indices: chosen from the top half by score, rejected
    from the bottom half (an odd count leaves the middle one out), chosen scoring strictly higher: a tie is no
    preference. Candidates tied across the middle fall into either half at random; the draw is `rng`'s."""
    if any(math.isnan(s) for s in scores):
        raise ValueError(f"a critic score is NaN: {list(scores)}")
    order = list(range(len(scores)))
    rng.shuffle(order)
    order.sort(key=lambda i: -scores[i])  # stable: tied candidates stay in the shuffled order
    half = len(scores) // 2
    top, bottom = order[:half], order[len(scores) - half :]
    options = [(c, r) for c in top for r in bottom if scores[c] > scores[r]]
    return rng.sample(options, min(k, len(options)))


def episode_pairs(
    episodes: Sequence[CriticEpisode], max_per_task: int, seed: int
) -> list[tuple[CriticEpisode, CriticEpisode]]:
    """Multi-turn DPO's pairs, as the critic's (`preference_pairs`): (chosen, rejected) episodes of the same
    task, the higher reward chosen, ties skipped, at most `max_per_task` per task (a draw seeded by (seed,
    task))."""
    index = preference_pairs(
        [e.reward for e in episodes], [(e.env, e.task_id) for e in episodes], max_per_task, seed
    )
    return [(episodes[c], episodes[r]) for c, r in index]


def episode_pair(chosen: CriticEpisode, rejected: CriticEpisode) -> Pair:
    """Two whole episodes as a DPO pair: every reply id counted, observations and template text not."""
    return Pair(
        chosen.ids, [min(t, 1) for t in chosen.turns], rejected.ids, [min(t, 1) for t in rejected.turns]
    )


def rft_rows(
    episodes: Sequence[CriticEpisode], epochs: float, seed: int, min_reward: float | None = None
) -> list[Row]:
    """Rejection fine-tuning's SFT rows (`gymflow.train.sft.train_sft` takes them): the successful episodes (or
    those with reward >= `min_reward`), ids as sampled, loss on the replies; `epochs` passes (a fraction being a
    seeded draw: `learning_set`)."""
    kept: dict[str, list[Row]] = {}
    for e in episodes:
        if e.success if min_reward is None else e.reward >= min_reward:
            kept.setdefault(e.env, []).append(
                {"input_ids": list(e.ids), "assistant_masks": [min(t, 1) for t in e.turns]}
            )
    if not kept:
        which = "successful episode" if min_reward is None else f"episode with reward >= {min_reward}"
        raise UserError(
            f"no {which} in the offline data: rejection fine-tuning has nothing to train on "
            "(collect more samples per task, or set sweet.rft.min_reward)"
        )
    return learning_set(kept, {}, {}, epochs, seed)


# ---- SWEET-RL's per-turn pairs ----------------------------------------------------------------------------
def build_turn_pairs(
    policy: PreTrainedModel,
    fmt: ChatFormat,
    critic: Critic,
    episodes: Sequence[CriticEpisode],
    params: CandidateParams,
    sampling: SamplingConfig,
    out_path: Path,
    critic_id: str,
) -> dict[str, Any]:
    """Sample, score and pair candidates for the turns of `episodes` and write the pairs table to `out_path`;
    the run's numbers. `sampling` is the rollout's (`SamplingConfig.from_rollout`) at the candidates'
    temperature, `params.temperature`: its `max_new_tokens` per reply and `batch_size` sequences sampled at once.
    `critic_id` names the critic's weights, so parts scored by another critic are never reused."""
    turns = replies_in_context(episodes)
    if params.turns is not None and params.turns < len(turns):
        keep = sorted(random.Random(params.seed).sample(range(len(turns)), params.turns))
        turns = [turns[i] for i in keep]
    if not turns:
        raise UserError("no turns to sample candidates for: the offline data has no sampled episodes")
    how = [params.model_dump(), sampling.max_new_tokens, weights_hash(policy), critic_id]
    run_key = config_hash([how, [(t.episode.episode_id, t.reply) for t in turns]])
    parts_dir = checkpoint_dir(out_path, run_key)
    parts_dir.mkdir(parents=True, exist_ok=True)
    tables, seconds = [], {"sampling": 0.0, "scoring": 0.0, "tokens": 0.0}
    bar = progress_bar(total=len(turns), desc="candidates", unit="turn")
    policy.eval()
    for part, first in enumerate(range(0, len(turns), PART_TURNS)):
        chunk = turns[first : first + PART_TURNS]
        path = parts_dir / f"part-{part:05d}.parquet"
        table = _read_part(path)
        if table is None:
            generator = torch.Generator().manual_seed(iteration_seed(params.seed, part))
            rows, took = _pairs_of(policy, fmt, critic, chunk, params, sampling, generator)
            meta = {SECONDS_KEY: json.dumps(took).encode()}
            table = pa.Table.from_pylist(rows, schema=PAIRS_SCHEMA.with_metadata(meta))
            write_table(path, table)
        took = json.loads((table.schema.metadata or {}).get(SECONDS_KEY, b"{}"))
        for key in seconds:
            seconds[key] += took.get(key, 0.0)
        tables.append(table.replace_schema_metadata(None))
        bar.update(len(chunk))
    bar.close()
    pairs = pa.concat_tables(tables)
    write_table(out_path, pairs)
    shutil.rmtree(parts_dir.parent, ignore_errors=True)
    return pair_metrics(pairs, len(turns), params.candidates, seconds)


def _pairs_of(
    policy: PreTrainedModel,
    fmt: ChatFormat,
    critic: Critic,
    turns: Sequence[Turn],
    params: CandidateParams,
    sampling: SamplingConfig,
    generator: torch.Generator,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The pair rows of `turns`, sampled `sampling.batch_size // candidates` turns at a time; the seconds spent
    sampling and scoring, and the candidate ids sampled."""
    n = params.candidates
    rows: list[dict[str, Any]] = []
    took = {"sampling": 0.0, "scoring": 0.0, "tokens": 0.0}
    per_call = max(1, sampling.batch_size // n)
    for first in range(0, len(turns), per_call):
        group = turns[first : first + per_call]
        start = time.perf_counter()
        prompts = [t.context for t in group for _ in range(n)]  # the policy's ids only: never the hidden text
        pad_id = fmt.tokenizer.pad_token_id
        replies = sample(
            policy,
            prompts,
            sampling.max_new_tokens,
            [fmt.eos_id],
            pad_id,
            sampling.temperature,
            generator=generator,
        )
        took["sampling"] += time.perf_counter() - start
        took["tokens"] += sum(len(r.token_ids) for r in replies)
        start = time.perf_counter()
        items = [
            CriticItem(t.episode.hidden, t.context, replies[k * n + j].token_ids)
            for k, t in enumerate(group)
            for j in range(n)
        ]
        scores = critic.score(items)
        took["scoring"] += time.perf_counter() - start
        for k, t in enumerate(group):
            ids = [r.token_ids for r in replies[k * n : (k + 1) * n]]
            mine = [float(s) for s in scores[k * n : (k + 1) * n]]
            picks = half_pairs(
                mine, params.pairs_per_turn, task_rng(params.seed, t.episode.episode_id, t.reply)
            )
            rows += [_row(t, ids, mine, c, r, j, fmt) for j, (c, r) in enumerate(picks)]
    return rows, took


def _row(
    t: Turn, ids: list[list[int]], scores: list[float], c: int, r: int, j: int, fmt: ChatFormat
) -> dict[str, Any]:
    e = t.episode
    return {
        "env": e.env,
        "episode_id": e.episode_id,
        "task_id": e.task_id,
        "turn": t.turn,
        "reply": t.reply,
        "pair": j,
        "candidates": len(ids),
        "scores": scores,
        "chosen": c,
        "rejected": r,
        "chosen_score": scores[c],
        "rejected_score": scores[r],
        "prompt_ids": t.context,
        "chosen_ids": ids[c],
        "rejected_ids": ids[r],
        "chosen_text": fmt.reply_text(ids[c]),
        "rejected_text": fmt.reply_text(ids[r]),
    }


def pair_metrics(pairs: pa.Table, turns: int, candidates: int, seconds: dict[str, float]) -> dict[str, Any]:
    """How many turns gave pairs (a turn whose candidates all tie gives none), the score gap, and the cost."""
    rows = pairs.select(["episode_id", "reply", "chosen_score", "rejected_score"]).to_pylist()
    paired = len({(r["episode_id"], r["reply"]) for r in rows})
    gap = sum(r["chosen_score"] - r["rejected_score"] for r in rows) / len(rows) if rows else 0.0
    total = seconds["sampling"] + seconds["scoring"]
    return {
        "turns": turns,
        "turns_with_pairs": paired,
        "pairs": len(rows),
        "candidates": candidates,
        "score_gap": round(gap, 5),
        "sampling_seconds": round(seconds["sampling"], 1),
        "candidate_tokens_per_s": round(seconds["tokens"] / seconds["sampling"])
        if seconds["sampling"]
        else 0,
        "scoring_seconds": round(seconds["scoring"], 1),
        "seconds_per_turn": round(total / turns, 3),
    }


def _read_part(path: Path) -> pa.Table | None:
    """A part file written whole by an earlier session, or None (missing or damaged: it is made again)."""
    if not path.exists():
        return None
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as f:
            table = f.read()
        if table.schema.remove_metadata() == PAIRS_SCHEMA:
            return table
    except Exception:  # any failure to read is damage; pyarrow raises a dozen kinds of it
        pass
    print(f"{path} is damaged: making it again")
    return None


def read_turn_pairs(path: Path) -> list[Pair]:
    """The pairs table at `path` as DPO's one-reply pairs (context, then the sampled reply ids)."""
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as f:
            if f.schema_arrow.remove_metadata() != PAIRS_SCHEMA:
                raise ValueError("not a pairs table")
            table = f.read(columns=["prompt_ids", "chosen_ids", "rejected_ids"])
    except Exception as e:  # missing, truncated or another table: one line that says how to rebuild it
        raise UserError(
            f"{path} does not read as SWEET-RL's pairs table ({e}): {rebuild_hint(path)}"
        ) from None
    return [Pair.reply(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in table.to_pylist()]
