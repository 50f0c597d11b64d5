"""The RL comparison tables: presets and horizons, mean and range over seeds, from DVC experiments' metrics."""

import flows.rl_compare as compare


def metrics(**success):
    return {env: {"all": {"success": s}} for env, s in success.items()}


def test_tables_average_each_preset_and_horizon_over_seeds(monkeypatch):
    sft = metrics(maze=0.3, babyai=0.2)
    runs = {
        "rl-loop-s0": {"sft": sft, "rl": metrics(maze=0.5, babyai=0.3)},
        "rl-loop-s1": {"sft": sft, "rl": metrics(maze=0.4, babyai=0.1)},
        "rl-grpo-s0": {"sft": sft, "rl": metrics(maze=0.35, babyai=0.2)},
        "rl-horizon-scaling-s0": {"sft": sft, "rl": metrics(maze=0.6, babyai=0.25)},
        "rl-rloo-s1": {"sft": sft},  # no evaluation of the RL agent: not shown
    }
    monkeypatch.setattr(compare, "finished", lambda repo, head: runs)
    presets, horizons = compare.tables(".", ["maze", "babyai"], iterations=9).split("\n\n")
    lines = presets.splitlines()
    assert (
        lines[0] == "| algorithm | seeds | maze | babyai |"
        and lines[2] == "| start (SFT) | 1 | 0.30 | 0.20 |"
    )
    assert "| loop | 2 | 0.45 (0.40-0.50) | 0.20 (0.10-0.30) |" in lines
    assert "| grpo | 1 | 0.35 | 0.20 |" in lines and not any("rloo" in line for line in lines)
    lines = horizons.splitlines()
    assert "| fixed, each env's own (15-20) | 2 | 0.45 (0.40-0.50) | 0.20 (0.10-0.30) |" in lines
    assert "| scaling 5-10-20 | 1 | 0.60 | 0.25 |" in lines and not any("short" in line for line in lines)


def test_the_schedule_grows_over_thirds_of_the_same_budget():
    variants = compare.horizons(9)
    assert variants["short (5 turns)"] == ["rl.horizon=[{turns:5}]"]
    assert variants["scaling 5-10-20"] == [
        "rl.horizon=[{turns:5,iterations:3},{turns:10,iterations:3},{turns:20}]"
    ]
    assert (
        compare.name("grpo", 1) == "rl-grpo-s1"
        and compare.name("scaling 5-10-20", 0) == "rl-horizon-scaling-s0"
    )
