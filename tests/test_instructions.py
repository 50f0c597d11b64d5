from gymflow.envs.base import Task
from gymflow.envs.instructions import draw_balanced, load_tasks, quotas, save_tasks


def stream(levels: str) -> list[Task]:
    return [Task("maze", f"t{i}", "", lvl, i, f"do {i}") for i, lvl in enumerate(levels)]


def test_balanced_over_difficulties_and_interleaved():
    tasks = draw_balanced(stream("aaaabbbbcccc"), 6, ["a", "b", "c"], set(), "eval")
    assert [t.task_id for t in tasks] == [
        "t0",
        "t4",
        "t8",
        "t1",
        "t5",
        "t9",
    ]  # levels in turn: prefixes balance
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


def test_quotas_respect_capacity_and_move_the_rest():
    assert quotas(10, ["a", "b", "c"], {}) == {"a": 4, "b": 3, "c": 3}
    assert quotas(10, ["a", "b", "c"], {"a": 1}) == {"a": 1, "b": 5, "c": 4}
    assert quotas(10, ["a", "b"], {"a": 2, "b": 3}) == {"a": 2, "b": 3}  # short overall: all they have


def test_capacity_stops_a_finite_stream_early():
    # Level b has one task; without the capacity the draw would read the whole stream looking for more.
    items = stream("ab" + "a" * 50)
    read = []
    tasks = draw_balanced((read.append(t) or t for t in items), 4, ["a", "b"], set(), "train", {"b": 1})
    assert sorted(t.difficulty for t in tasks) == ["a", "a", "a", "b"]
    assert len(read) == 5
