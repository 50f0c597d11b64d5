"""Stage `learn@<iteration>` (AgentEvol): keep the explored episodes that reached `evol.threshold` (the SQL in
`gymflow.train.evol.KEPT_SQL`), merge them with the SFT data, and train the next agent.

    dvc repro learn@evol1         # or: python -m stages.learn evol1
Writes data/evol/<iteration>.kept.parquet (the filtered data set: kept episodes with the ids they are trained
on), data/models/<iteration>, data/plots/learn/<iteration>.csv and data/metrics/learn/<iteration>.json.
"""

from collections import defaultdict

from gymflow import paths
from gymflow.agent.chat import ChatFormat
from gymflow.config import load_params
from gymflow.models.build import load_tokenizer, resolve
from gymflow.stage import ITERATION, iteration_arg, main_process, run_stage, write_metrics
from gymflow.train.evol import kept_episodes, learner, learning_set, sft_rows, write_kept
from gymflow.train.sft import train_sft


def main() -> None:
    params = load_params()
    name = iteration_arg(params, "learn")
    settings, explorer = params.evol.at(name), params.evol.iterations[name].explorer
    tokenizer = load_tokenizer(resolve(paths.model("init")))
    rollouts = paths.explored(name)
    kept = kept_episodes(
        rollouts, params.evol.index(name), settings.threshold, ChatFormat(tokenizer), settings.keep
    )
    write_kept(paths.kept(name), kept)
    by_env = defaultdict(list)
    for row in kept:
        by_env[row["env"]].append({k: row[k] for k in ("input_ids", "assistant_masks")})
    sft_envs = list(params.sft.envs)
    sft = sft_rows(paths.TRAJECTORY_ROLLOUTS, sft_envs, tokenizer) if settings.merge_sft else {}
    data = learning_set(by_env, sft, params.sft.envs, settings.epochs, settings.seed)
    start, cfg = learner(settings, explorer, params.sft)
    metrics = train_sft(
        resolve(paths.model(start)),
        paths.model(name),
        data,
        cfg,
        paths.plot(f"learn/{name}"),
    )
    metrics |= {"start": start, "kept": {env: len(rows) for env, rows in sorted(by_env.items())}}
    if main_process():  # under `accelerate launch`, the first process reports
        write_metrics(f"learn/{name}", metrics)
        print(f"{name}: kept {metrics['kept']}, trained from {start} on {metrics['episodes']} episodes")


if __name__ == "__main__":
    run_stage(
        main,
        resume_note="the last checkpoint (data/models/<iteration>.checkpoints) is kept; run the stage again to resume from it",
        arguments=ITERATION,
    )
