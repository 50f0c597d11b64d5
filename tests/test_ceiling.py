"""The imitation ceiling's readers and lookup table (gymflow/eval/ceiling.py), each against a case worked by
hand: what a reader reads from the text, how an action is written in the table's terms and back, which action
the table picks and where it backs off, and that a table fitted on a demonstration plays it back."""

from gymflow.envs.base import Task
from gymflow.envs.instructions import with_view
from gymflow.envs.textcraft import make_task
from gymflow.envs.wordle import Wordle, feedback, word_lists
from gymflow.eval.ceiling import (
    BabyAIReader,
    LookupPolicy,
    MazeReader,
    TextCraftReader,
    WordleReader,
    by_difficulty,
    crafting_tree,
    demonstrated,
    first_fitting_answer,
    listed_recipes,
    maze_features,
    misread,
    parse_mission,
    play,
    states_and_moves,
)

# a 3x3 maze, by hand: from 0,0 the only way is right; the goal 2,0 lies down
LAYOUT = [["r", "lrd", "l"], ["d", "ud", "d"], ["ur", "lu", "u"]]
HAND = Task(
    env="maze",
    task_id="maze-hand",
    split="train",
    difficulty="5x5",
    seed=0,
    instruction="Reach the goal at 2,0.",
    hidden={"size": 3, "open": LAYOUT, "start": [0, 0], "goal": [2, 0], "path": []},
)


def maze_state(goal: str, open_ways: str, last: str) -> MazeReader:
    return MazeReader(f"Goal is {goal}. Open: {open_ways}. Last move: {last}.")


# ---- maze ---------------------------------------------------------------------------------------------------
def test_maze_features_read_both_views_alike():
    verbal = maze_features("Goal is down and left. Open: up, down. Last move: up.", None)
    coords = maze_features("pos 1,2 goal 3,0 walls: left, right", "up")
    assert verbal == coords == ("down and left", "up, down", "up")
    assert maze_features("You reached the goal at 3,0.", None) is None


def test_the_maze_reader_keeps_the_last_move_that_went_through():
    reader = MazeReader("Reach the goal at 2,0. pos 0,0 goal 2,0 walls: up, down, left")
    reader.update("move down", "A wall blocks down. pos 0,0 goal 2,0 walls: up, down, left")
    assert reader.keys() == (("down", "right", "none"), ("down", "right"))
    reader.update("move right", "pos 0,1 goal 2,0 walls: up")
    assert reader.keys() == (
        ("down and left", "down, left, right", "right"),
        ("down and left", "down, left, right"),
    )


def test_the_lookup_table_takes_the_most_frequent_move_and_backs_off():
    k1, k2 = maze_state("down", "up, down", "up").keys(), maze_state("down", "up, down", "none").keys()
    table = LookupPolicy([(k1, "move up"), (k1, "move down"), (k1, "move down"), (k2, "move up")])
    assert table(maze_state("down", "up, down", "up")) == "move down"
    # an unseen last move: (goal, open) votes 2-2, and ties go alphabetically
    assert table(maze_state("down", "up, down", "left")) == "move down"
    # nothing seen: toward the goal where that way is open, else the first open way
    assert table(maze_state("left", "up, left", "none")) == "move left"
    assert table(maze_state("left", "up", "none")) == "move up"
    assert table.levels == {0: 1, 1: 1, 2: 2}


def test_a_table_fitted_on_the_expert_plays_the_hand_maze():
    demo = demonstrated("maze", [with_view(HAND, "verbal")], "expert")[0]
    pairs = list(states_and_moves(demo, MazeReader))
    assert [a for _, a in pairs] == ["move right", "move down", "move down", "move left"]
    assert play("maze", LookupPolicy(pairs), [with_view(HAND, "verbal")]) == [True]
    assert play("maze", LookupPolicy(pairs), [HAND]) == [True]  # the coordinate view reads the same keys


# ---- babyai -------------------------------------------------------------------------------------------------
def test_missions_parse_into_clauses_in_the_order_they_are_done():
    two = parse_mission("open the blue door, then open the grey door")
    assert [(c.verb, c.color, c.kind) for c in two] == [("open", "blue", "door"), ("open", "grey", "door")]
    after = parse_mission("pick up a ball after you open the red door")
    assert [c.verb for c in after] == ["open", "pick up"]
    (put,) = parse_mission("put the red ball next to the blue key")
    assert (put.color, put.kind, put.fixed_color, put.fixed_kind) == ("red", "ball", "blue", "key")
    (left,) = parse_mission("pick up a key on your left")
    assert (left.color, left.kind, left.where) == (None, "key", "on your left")


def test_the_babyai_reader_names_objects_by_role_and_grounds_them_back():
    reader = BabyAIReader(
        "Your goal: go to the red ball\nYou see: red ball 1 (1 ahead); blue key 1 (2 ahead, 1 left); "
        "red ball 2 (3 ahead). Facing: red ball 1, 1 step away. Carrying nothing."
    )
    assert [reader.role(s) for s in reader.seen] == ["target", "other", "target"]
    assert reader.keys()[-1] == ("go to #0",)
    assert reader.keys()[0] == (
        "go to #0",
        "ahead",
        "nothing",
        "none",
        "none",
        "none",
        "target:1",
        "other,target",
        "none",
    )
    assert reader.abstract("go to red ball 2") == "go to <target>"  # the role, not which one
    assert reader.abstract("go to green box 1") is None  # not in view: nothing to name
    assert reader.ground("go to <target>") == "go to red ball 1"  # the nearest of its role
    assert reader.ground("pick up <other>") == "pick up blue key 1"
    assert reader.ground("pick up <key>") is None
    assert reader.ground("turn left") == "turn left"


def test_the_babyai_reader_tracks_the_clause_the_key_and_what_is_carried():
    reader = BabyAIReader(
        "Your goal: open the blue door, then open the grey door\nYou see: blue locked door 1 (3 ahead); "
        "grey key 1 (1 ahead, 1 right). Facing: blue locked door 1, 3 steps away. Carrying nothing."
    )
    assert reader.keys()[2] == ("open #0", "seen:locked", "nothing", "seen", "none", "none")
    reader.update(
        "pick up grey key 1",
        "You picked up the grey key. You see: blue locked door 1 (2 ahead). "
        "Facing: blue locked door 1, 2 steps away. Carrying: grey key.",
    )
    assert reader.keys()[2] == ("open #0", "seen:locked", "key", "none", "none", "none")
    assert reader.last == "pick up <key>"
    reader.update(
        "toggle",
        "The blue door is now open. You see: blue open door 1 (1 ahead). "
        "Facing: blue open door 1, 1 step away. Carrying nothing.",
    )
    assert reader.clause.color == "grey" and reader.keys()[-1] == ("open #1",)
    assert reader.role("blue open door 1") == "door"  # no longer the target


def test_where_the_mission_says_is_read_while_the_agent_only_turns():
    reader = BabyAIReader(
        "Your goal: open the door on your left\nYou see: grey closed door 1 (3 ahead, 2 left); red closed door 1 "
        "(2 ahead, 1 right). Facing: wall, 4 steps away. Carrying nothing."
    )
    assert [reader.role(s) for s in reader.seen] == ["target", "door"]
    # after a left turn, what is ahead now lay on the left at the start; what is on the right now lay ahead
    reader.update(
        "turn left",
        "You see: green closed door 1 (3 ahead); blue closed door 1 (2 right). "
        "Facing: green closed door 1, 3 steps away. Carrying nothing.",
    )
    assert [reader.role(s) for s in reader.seen] == ["target", "door"]
    reader.update(
        "turn left",
        "You see: blue closed door 1 (2 ahead). Facing: blue closed door 1, 2 steps away. Carrying nothing.",
    )
    assert reader.role("blue closed door 1") == "door"  # ahead after two left turns: behind at the start
    reader.update(
        "move forward", "You see: blue closed door 1 (1 left). Facing: wall, 1 step away. Carrying nothing."
    )
    assert reader.role("blue closed door 1") == "target"  # once it has walked, any door


def test_misreading_counts_the_moves_no_demonstration_makes():
    episode = [
        {"role": "system", "content": "You are an exploration master."},
        {
            "role": "user",
            "content": "Your goal: go to the red ball\nYou see: red ball 1 (2 ahead). Facing: open floor. "
            "Carrying nothing.",
        },
        {"role": "assistant", "content": "Thought: a ball.\nAction: go to blue ball 1"},  # not in view
        {"role": "user", "content": 'There is no "blue ball 1" in view.'},
        {"role": "assistant", "content": "Thought: I should go."},  # no action at all
        {"role": "user", "content": "No action found."},
        {"role": "assistant", "content": "Thought: there.\nAction: go to red ball 1"},
    ]
    assert misread("babyai", [episode]) == (2, 3)
    assert [a for _, a in states_and_moves(episode, BabyAIReader)] == ["go to <target>"]


# ---- textcraft ----------------------------------------------------------------------------------------------
PICKAXE = (
    "Crafting commands:\ncraft 4 stick using 2 oak planks\ncraft 4 oak planks using 1 oak log\n"
    "craft 1 golden pickaxe using 3 gold ingot, 2 stick\ncraft 1 wooden pickaxe using 3 oak planks, 2 stick\n"
    "Goal: craft wooden pickaxe."
)


def test_the_crafting_tree_is_read_from_the_listed_commands():
    recipes, goal = listed_recipes(PICKAXE)
    assert goal == "wooden pickaxe" and recipes["stick"] == (4, [("oak planks", 2)])
    places, with_counts, shape = crafting_tree(recipes, goal)
    assert places == {"wooden pickaxe": "g", "oak planks": "g.1", "oak log": "g.1.1", "stick": "g.2"}
    assert with_counts == "1(3*4(1*b),2*4(2*@g.1))"  # the stick's planks are the planks met before
    assert shape == "((b),(@g.1))"


def test_the_textcraft_reader_counts_the_inventory_and_writes_amounts_as_multiples():
    reader = TextCraftReader(PICKAXE)
    assert reader.keys() == (("1(3*4(1*b),2*4(2*@g.1))", ""), ("((b),(@g.1))", ""))
    assert reader.abstract("get 2 oak log") == "get x2 <g.1.1>"  # twice what the planks' recipe takes
    assert reader.abstract("craft 8 oak planks using 2 oak log") == "craft x2 <g.1>"
    assert reader.abstract("get 3 gold ingot") is None  # a distractor's ingredient: no place in the tree
    reader.update("get 2 oak log", "Got 2 oak log")
    reader.update("craft 8 oak planks using 2 oak log", "Crafted 8 oak planks")
    reader.update(
        "craft 4 stick using 3 oak planks", "Wrong counts for stick: use craft 4 stick using 2 oak planks"
    )
    assert reader.keys() == (("1(3*4(1*b),2*4(2*@g.1))", "g.1=8"), ("((b),(@g.1))", "g.1"))
    assert reader.ground("craft x1 <g.2>") == "craft 4 stick using 2 oak planks"
    assert reader.ground("get x1 <g.2>") is None  # a stick is crafted, not got
    assert reader.ground("craft x1 <g.3>") is None  # no third ingredient here


def test_a_textcraft_table_plays_a_tree_of_the_same_shape_with_other_items_and_counts():
    demo = [
        {"role": "user", "content": "Crafting commands:\ncraft 2 bowl using 3 oak planks\nGoal: craft bowl."},
        {"role": "assistant", "content": "Action: get 6 oak planks"},
        {"role": "user", "content": "Got 6 oak planks"},
        {"role": "assistant", "content": "Action: craft 4 bowl using 6 oak planks"},
    ]
    table = LookupPolicy(states_and_moves(demo, TextCraftReader))
    pane = TextCraftReader("Crafting commands:\ncraft 16 glass pane using 6 glass\nGoal: craft glass pane.")
    assert table(pane) == "get 12 glass"  # twice what the recipe takes, as the demonstration did
    pane.update("get 12 glass", "Got 12 glass")
    assert table(pane) == "craft 32 glass pane using 12 glass"
    assert table.levels == {1: 2}  # the shape, not the counts, was seen


def test_a_table_fitted_on_the_expert_plays_its_textcraft_task():
    task = make_task("wooden pickaxe")
    pairs = list(states_and_moves(demonstrated("textcraft", [task], "expert")[0], TextCraftReader))
    assert [a for _, a in pairs] == ["get x2 <g.1.1>", "craft x2 <g.1>", "craft x1 <g.2>", "craft x1 <g>"]
    assert play("textcraft", LookupPolicy(pairs), [task]) == [True]
    # no table: "inventory" until the turns run out
    assert play("textcraft", LookupPolicy([]), [task]) == [False]


def test_success_is_counted_over_all_tasks_and_per_difficulty():
    tasks = [make_task(goal) for goal in ("wooden pickaxe", "stick", "oak planks")]
    assert [t.difficulty for t in tasks] == ["3", "2", "1"]
    assert by_difficulty(tasks, [True, False, True]) == {"all": 2 / 3, "3": 1.0, "2": 0.0, "1": 1.0}


# ---- wordle -------------------------------------------------------------------------------------------------
def test_the_wordle_reader_keys_on_the_feedback_and_never_repeats_a_guess():
    reader = WordleReader("Guess the hidden 5-letter word in 6 tries.")
    assert reader.keys() == (("",), ("Feedback so far: _ _ _ _ _.",), ("0",))
    reader.update("t r a c e", "t r a c e -> b y g b g. 5 guesses left.")
    reader.update("zzzzz", 'Invalid word "zzzzz": not in the vocabulary. Not counted, 5 guesses left.')
    assert reader.keys() == (("trace:bygbg",), ("Feedback so far: _ _ a _ e, also has r, no c t.",), ("1",))
    assert reader.abstract("Shire") == "shire" and reader.abstract("s h i r e") == "shire"
    assert reader.ground("trace") is None and reader.ground("shire") == "s h i r e"


def test_a_wordle_table_backs_off_to_the_guess_number():
    start = WordleReader("").keys()
    after = WordleReader("")
    after.update("t r a c e", "t r a c e -> b b b b b. 5 guesses left.")
    table = LookupPolicy([(start, "trace"), (after.keys(), "lousy")])
    other = WordleReader("")
    other.update("t r a c e", "t r a c e -> g b b b b. 5 guesses left.")
    # feedback never seen, nor what it implies: the second guess the demonstration made
    assert table(other) == "l o u s y" and table.levels == {2: 1}
    other.update("l o u s y", "l o u s y -> b b b b b. 4 guesses left.")
    assert table(other) == "t r a c e"  # nothing for a third guess: the fallback, the opener
    assert play("wordle", table, [task_of("trace")]) == [True]


def task_of(answer: str) -> Task:
    return next(t for t in Wordle.generate("eval", 0) if t.hidden["answer"] == answer)


def test_the_first_fitting_answer_reads_every_mark():
    history = [("trace", feedback("trace", "shake")), ("salon", feedback("salon", "shake"))]
    reader = WordleReader("")
    for guess, marks in history:
        reader.update(" ".join(guess), f"{' '.join(guess)} -> {' '.join(marks)}. 4 guesses left.")
    fitting = [a for a in word_lists()[0] if all(feedback(g, a) == m for g, m in history)]
    assert first_fitting_answer(reader) == " ".join(fitting[0])
    assert play("wordle", first_fitting_answer, [task_of("shake")]) == [True]
