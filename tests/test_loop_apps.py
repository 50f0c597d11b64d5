"""LOOP on apps: the experiment's overrides replace rl.tasks, and the tables read TGC, SGC and Figure 3a's ratios
from the experiment's evaluation metrics."""

import flows.loop_apps as loop_apps


def apps_metrics(success, sgc, reward, behaviour, noop=None):
    levels = {
        level: {"success": s, "sgc": g, "reward": r}
        for level, s, g, r in zip("123", success, sgc, reward, strict=True)
    }
    for level, floor in zip("123", noop or (), strict=False):
        levels[level]["noop_reward"] = floor
    return {"apps": levels | {"behaviour": behaviour}}


def test_tables_show_goal_completion_and_behaviour_ratios(monkeypatch):
    sft_b = {
        "turns_per_episode": 16.0,
        "show_api_doc_per_episode": 9.0,
        "give_up_rate": 0.5,
        "dummy_per_episode": 0.0,
    }
    loop_b = {
        "turns_per_episode": 8.0,
        "show_api_doc_per_episode": 3.6,
        "give_up_rate": None,
        "dummy_per_episode": 0.0,
    }
    runs = {
        "loop-apps": {
            "init": apps_metrics((0, 0, 0), (0, 0, 0), (0, 0, 0), {}),
            "sft": apps_metrics((0.5, 0.2, 0), (0.3, 0, 0), (0.8, 0.5, 0.25), sft_b),
            "rl": apps_metrics((0.6, 0.2, 0.1), (0.4, 0.1, 0), (0.9, 0.5, 0.3), loop_b, (0.67, 0.52, 0.39)),
        }
    }
    monkeypatch.setattr(loop_apps, "finished", lambda repo, head: runs)
    text = loop_apps.tables(".")
    assert "| sft | 0.50 / 0.20 / 0.00 | 0.30 / 0.00 / 0.00 | 0.80 / 0.50 / 0.25 |" in text
    assert "| LOOP | 0.60 / 0.20 / 0.10 | 0.40 / 0.10 / 0.00 | 0.90 / 0.50 / 0.30 |" in text
    assert (
        "| no-op: complete_task() at once | - | - | 0.67 / 0.52 / 0.39 |" in text
    )  # beside every apps result
    assert "| turns per episode | 16.000 | 8.000 | 0.50x |" in text
    assert "| show_api_doc calls per episode | 9.000 | 3.600 | 0.40x |" in text
    assert "| failed-API give-up rate | 0.500 | - | - |" in text  # nothing failed after LOOP: no rate
    assert "| 'dummy' per episode | 0.000 | 0.000 | - |" in text  # 0 -> 0 has no ratio
    # evaluations from before the no-op was measured: no row, not a wrong one
    runs["loop-apps"]["rl"] = apps_metrics((0.6, 0.2, 0.1), (0.4, 0.1, 0), (0.9, 0.5, 0.3), loop_b)
    assert "no-op" not in loop_apps.tables(".")
    monkeypatch.setattr(loop_apps, "finished", lambda repo, head: {})
    assert "no finished experiment 'loop-apps'" in loop_apps.tables(".")


def test_the_overrides_replace_the_default_rl_tasks():
    assert loop_apps.OVERRIDES[:2] == ["~rl.tasks", "+rl.tasks={apps: 8}"]
    assert "+rl.difficulties={apps: ['1', '2']}" in loop_apps.OVERRIDES
