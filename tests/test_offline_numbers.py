"""SWEET-RL's offline data numbers (gymflow/train/offline.py): by hand, and the same in any row order, where a
sum in the order DuckDB's threads finish moved the mean reward's last digit between runs of the same episodes."""

import itertools

from gymflow.train.offline import offline_numbers


def test_numbers_by_hand():
    rows = [("a", False, 0.2), ("a", True, 1.0), ("b", False, 0.0), ("b", False, 0.0), ("c", False, 0.1)]
    # 5 episodes, 1 success; rewards 1.3 / 5; three tasks, of which only a's samples differ
    assert offline_numbers(rows) == {
        "episodes": 5,
        "success": 0.2,
        "reward": 0.26,
        "tasks": 3,
        "tasks_with_pairs": 1,
    }


def test_the_same_numbers_in_every_row_order():
    rewards = [0.5513, 0.7066, 0.5474, 0.8145]  # left-to-right sums of its orders round to 0.6549 or 0.655
    assert len({round(sum(order) / 4, 4) for order in itertools.permutations(rewards)}) == 2
    rows = [(f"t{i}", False, r) for i, r in enumerate(rewards)]
    results = [offline_numbers(list(order)) for order in itertools.permutations(rows)]
    assert all(r == results[0] for r in results) and results[0]["reward"] == 0.655  # the exact mean, 0.65495
