"""Forward passes bounded by padded size (gymflow/train/batching.py), on hand-worked cases."""

from gymflow.train.batching import length_chunks


def test_rows_are_cut_shortest_first_at_the_padded_budget():
    lengths = [5, 2, 9, 3, 4]
    # sorted: 1 (2), 3 (3), 4 (4), 0 (5), 2 (9); budget 12: [1, 3, 4] pads to 3 x 4 = 12, adding 0 would be
    # 4 x 5 = 20; [0] then 2 x 9 = 18 > 12, so 2 alone
    assert length_chunks(range(5), lengths.__getitem__, 12) == [[1, 3, 4], [0], [2]]
    assert length_chunks(range(5), lengths.__getitem__, 100) == [[1, 3, 4, 0, 2]]


def test_a_row_over_the_budget_gets_a_pass_of_its_own_and_only_order_is_cut():
    lengths = [50, 1, 1]
    assert length_chunks([0, 2], lengths.__getitem__, 10) == [[2], [0]]
    assert length_chunks([], lengths.__getitem__, 10) == []
