"""Stage `best_of_n` (SWEET-RL Figure 3a): the agent plays held-out tasks; at each turn N candidates are
sampled and the one a critic ranks highest is executed, for every critic of `sweet.critics` and a random pick.

    dvc repro sweet/dvc.yaml:best_of_n     # or: python -m stages.best_of_n
Writes data/rollouts/best_of_n/<chooser>.n<N>.{episodes,turns}.parquet (the executed turns with the critic's
score in `turns.critic_score`), data/plots/best_of_n.csv (success and reward against N per chooser),
data/metrics/best_of_n.json and data/metrics/best_of_n_paired.json (per N > 1, each critic against the random
pick and the critics against each other in `sweet.critics`' order: per-task paired differences of success).
"""

from gymflow import paths
from gymflow.config import load_params
from gymflow.envs.instructions import load_tasks
from gymflow.eval.best_of_n import CriticChooser, RandomChooser, best_of_n_curve, paired_choosers
from gymflow.rollout.engine import SamplingConfig
from gymflow.rollout.play import load_policy
from gymflow.stage import required, run_stage, write_metrics
from gymflow.store.io import write_csv
from gymflow.train.critic import critic_hash, load_critic
from gymflow.train.draws import draw_tasks


def main() -> None:
    params = load_params()
    sweet = required(params.sweet, "sweet")
    bon = sweet.best_of_n
    policy = load_policy(sweet.start, paths.model(sweet.start))
    tasks = draw_tasks(load_tasks(paths.DATA, sweet.env, "eval"), bon.tasks, sweet.seed, 0)
    cfg = SamplingConfig.from_rollout(params.rollout, temperature=bon.temperature)
    out = paths.BEST_OF_N_ROLLOUTS
    curves = {}
    for name in sweet.critics:
        critic = load_critic(paths.critic(name))
        settings = [name, critic_hash(critic)]  # a retrained critic plays again
        curves[name] = best_of_n_curve(
            policy, tasks, bon.ns, name, lambda c=critic: CriticChooser(c), cfg, sweet.seed, out, settings
        )
    curves["random"] = best_of_n_curve(
        policy, tasks, bon.ns, "random", lambda: RandomChooser(sweet.seed), cfg, sweet.seed, out, "random"
    )
    rows = [
        {"n": n} | {f"{c}_{k}": curves[c][str(n)][k] for c in curves for k in ("success", "reward")}
        for n in bon.ns
    ]
    write_csv(paths.plot("best_of_n"), rows, list(rows[0]))
    write_metrics("best_of_n", curves)
    write_metrics("best_of_n_paired", paired_choosers(out, list(curves), bon.ns))
    for row in rows:
        print(row)


if __name__ == "__main__":
    run_stage(
        main, resume_note="finished (chooser, N) tables are kept; run the stage again to play the others"
    )
