"""The comparison table of AgentEvol's variants: means and ranges over seeds, from DVC experiments' metrics."""

import flows.evol_compare as compare
from flows.experiments import completed
from gymflow.config import EvolParams


def metrics(**success):
    return {env: {"all": {"success": s}} for env, s in success.items()}


def test_the_table_averages_each_variant_over_seeds_and_shows_the_range(monkeypatch):
    runs = {
        "evol-agentevol-s0": {"sft": metrics(maze=0.4), "evol1": metrics(maze=0.5)},
        "evol-agentevol-s1": {"sft": metrics(maze=0.4), "evol1": metrics(maze=0.3)},
        "evol-rft-s0": {"sft": metrics(maze=0.4), "evol1": metrics(maze=0.45)},
    }
    monkeypatch.setattr(compare, "finished", lambda repo, head: runs)
    lines = compare.table(".", ["maze"]).splitlines()
    assert lines[0] == "| variant | agent | seeds | maze |"
    assert "| agentevol | sft | 2 | 0.40 (0.40-0.40) |" in lines
    assert "| agentevol | evol1 | 2 | 0.40 (0.30-0.50) |" in lines
    assert "| rft | evol1 | 1 | 0.45 |" in lines and not any(line.startswith("| ei ") for line in lines)


def evol(m):
    iterations = {"a": {"explorer": "sft"}} | {f"it{i}": {"explorer": "a"} for i in range(2, m + 1)}
    return EvolParams(tasks={"maze": 5}, epochs=0.15, iterations=iterations)


def test_rft_is_one_round_of_m_samples_with_m_times_the_passes_and_the_control_keeps_nothing():
    rft = compare.variants(evol(4))["rft"]
    assert "+evol.iterations.a.samples=4" in rft and "evol.epochs=0.6" in rft  # not 0.6000000000000001
    removed = {"~evol.iterations.it2", "~evol.iterations.it3", "~evol.iterations.it4"}
    assert removed | {"evol.merge_sft=false", "evol.learn_from=sft"} <= set(rft)
    assert compare.variants(evol(1))["rft"][0] == "+evol.iterations.a.samples=1"  # nothing to remove
    variants = compare.variants(evol(2))
    assert {"~evol.iterations.it2", "+evol.iterations.a.samples=2", "evol.epochs=0.3"} <= set(variants["rft"])
    assert variants["ei"] == ["evol.learn_from=last", "evol.merge_sft=false"]
    assert variants["control"] == ["evol.threshold=2"]  # above any reward: every success is 1 or less
    assert tuple(variants) == compare.VARIANTS  # the table lists the variants the flow runs, in that order


def shown_rev(name, maze):
    path = "data/metrics/evaluate/evol1.json"
    return {"rev": name, "name": name, "data": {"metrics": {path: {"data": metrics(maze=maze)}}}}


def test_completed_experiments_skip_running_ones_and_the_checked_out_commit_is_agentevol_seed_0():
    shown = [  # `dvc exp show --json -A`: the workspace, then commits newest first, each with its experiments
        {"rev": "workspace", "experiments": None},
        {
            **shown_rev("new", 0.3),
            "experiments": [
                {"executor": {"state": "running"}, "revs": [shown_rev("evol-ei-s1", 0.9)]},
                {"executor": None, "revs": [shown_rev("evol-rft-s0", 0.4)]},
            ],
        },
        {
            **shown_rev("old", 0.1),
            "experiments": [{"executor": None, "revs": [shown_rev("evol-rft-s0", 0.2)]}],
        },
    ]
    runs = completed(shown, "new", "evol-agentevol-s0")
    assert sorted(runs) == ["evol-agentevol-s0", "evol-rft-s0"]
    assert runs["evol-agentevol-s0"]["evol1"]["maze"]["all"]["success"] == 0.3
    assert runs["evol-rft-s0"]["evol1"]["maze"]["all"]["success"] == 0.4  # the newer commit's run
