"""SWEET-RL's comparison tables (Table 2, Figure 3a) from DVC experiments' metrics: means and ranges over
seeds, the starting agent's rows once, N in numeric order."""

import flows.sweet_compare as compare


def score(success, reward):
    return {"colbench": {"all": {"success": success, "reward": reward}}}


def curve(*rewards):
    return {str(n): {"success": 0.0, "reward": r} for n, r in zip((1, 2, 16), rewards, strict=True)}


def test_table2_averages_each_method_over_seeds_and_shows_the_start_once():
    sft = score(0.0, 0.22) | {"colbench_single": {"all": {"success": 0.01, "reward": 0.21}}}
    runs = {
        "sweet-s0": {"evaluate/sft": sft, "evaluate/sweet": score(0.1, 0.3), "evaluate/rft": score(0.0, 0.2)},
        "sweet-s1": {"evaluate/sft": sft, "evaluate/sweet": score(0.3, 0.5)},  # rft not evaluated: one seed
    }
    lines = compare.table2(runs, "colbench").splitlines()
    assert lines[2] == "| Single-turn (the SFT agent, submit at once) | 1 | 0.01 | 0.21 |"
    assert lines[3] == "| Zero-shot collaborative (the SFT agent) | 1 | 0.00 | 0.22 |"
    assert "| SWEET-RL | 2 | 0.20 (0.10-0.30) | 0.40 (0.30-0.50) |" in lines
    assert "| Rejection fine-tuning | 1 | 0.00 | 0.20 |" in lines
    assert not any("Multi-turn DPO" in line for line in lines)


def test_figure3a_orders_n_numerically_and_averages_choosers_over_seeds():
    runs = {
        "sweet-s0": {"best_of_n": {"hidden": curve(0.1, 0.2, 0.4), "random": curve(0.1, 0.1, 0.1)}},
        "sweet-s1": {"best_of_n": {"hidden": curve(0.3, 0.2, 0.6), "random": curve(0.3, 0.1, 0.3)}},
    }
    text = compare.figure3a(runs, "reward")
    assert "(2 seeds)" in text
    lines = text.splitlines()
    assert lines[2] == "| chooser | N=1 | N=2 | N=16 |"
    assert "| hidden | 0.200 | 0.200 | 0.500 |" in lines and "| random | 0.200 | 0.100 | 0.200 |" in lines
    assert compare.figure3a({"sweet-s0": {}}, "reward") == ""


def test_the_sweet_flow_reads_each_agents_held_out_scores(tmp_path):
    import json

    from flows.sweet import agent_rows

    folder = tmp_path / "data/metrics/evaluate"
    folder.mkdir(parents=True)
    for agent, (s, r) in {"sft": (0.0, 0.22), "sweet": (0.1, 0.3), "mtdpo": (0.0, 0.18)}.items():
        (folder / f"{agent}.json").write_text(json.dumps(score(s, r)))
    assert agent_rows(str(tmp_path), "colbench") == [
        {"agent": "sft", "success": 0.0, "reward": 0.22},
        {"agent": "SWEET-RL", "success": 0.1, "reward": 0.3},
        {"agent": "multi-turn DPO", "success": 0.0, "reward": 0.18},
    ]
