from gymflow.envs.base import Task
from gymflow.envs.instructions import draw_balanced, load_tasks, save_tasks


def stream(levels: str) -> list[Task]:
    return [Task("maze", f"t{i}", "", lvl, i, f"do {i}") for i, lvl in enumerate(levels)]


def test_balanced_over_difficulties_in_stream_order():
    tasks = draw_balanced(stream("aaaabbbbcccc"), 6, ["a", "b", "c"], set(), "eval")
    assert [t.task_id for t in tasks] == ["t0", "t1", "t4", "t5", "t8", "t9"]
    assert {t.split for t in tasks} == {"eval"}


def test_uneven_quota_and_top_up_from_other_levels():
    # 5 over 2 levels: a gets 3, b gets 2; b has only one task, so a spare fills the gap.
    tasks = draw_balanced(stream("aaaaab"), 5, ["a", "b"], set(), "train")
    assert sorted(t.task_id for t in tasks) == ["t0", "t1", "t2", "t3", "t5"]


def test_excluded_and_duplicate_ids_are_skipped():
    items = stream("aaaa") + stream("aaaa")  # the same ids twice
    tasks = draw_balanced(items, 3, ["a"], {"t0"}, "train")
    assert [t.task_id for t in tasks] == ["t1", "t2", "t3"]


def test_short_stream_gives_what_it_has():
    assert len(draw_balanced(stream("ab"), 5, ["a", "b"], set(), "train")) == 2


def test_save_and_load_tasks(tmp_path):
    splits = {"train": stream("ab"), "eval": [Task("maze", "e", "eval", "a", 9, "x", {"k": [1, 2]})]}
    save_tasks(tmp_path, "maze", splits)
    assert load_tasks(tmp_path, "maze", "eval") == splits["eval"]
    assert [t.task_id for t in load_tasks(tmp_path, "maze")] == ["t0", "t1", "e"]
