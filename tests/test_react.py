from gymflow.agent.react import format_react, parse_action


def test_format_then_parse_round_trips():
    reply = format_react("I need planks.", "craft 4 oak planks using 1 oak log")
    assert reply == "Thought: I need planks.\nAction: craft 4 oak planks using 1 oak log"
    assert parse_action(reply) == "craft 4 oak planks using 1 oak log"


def test_parse_takes_the_last_action_first_line_and_strips_quotes():
    assert parse_action("Thought: a\nAction: move up\nAction: `move down`\nmore text") == "move down"
    assert parse_action("thought: x action:  inventory ") == "inventory"
    assert parse_action('Action: "s h i r e"') == "s h i r e"


def test_parse_without_action_is_none():
    assert parse_action("Thought: I am lost.") is None
    assert parse_action("Action:   ") is None
    assert parse_action("") is None


def test_multiline_parse_keeps_the_code_after_the_first_action_line():
    reply = "Thought: done.\nAction: submit\ndef f(action: str):\n    Action: int = 1\n    return action\n"
    assert (
        parse_action(reply, multiline=True)
        == "submit\ndef f(action: str):\n    Action: int = 1\n    return action"
    )
    assert parse_action("Action: submit\ndef f(x):\n    return x") == "submit"  # single-line parse unchanged
    # a marker inside the thought does not count when one starts a line; with none at a line start, the first
    assert (
        parse_action("Thought: my action: ask\nAction: ask What is the fee?", multiline=True)
        == "ask What is the fee?"
    )
    assert parse_action("thought: x action:  ask why?\n", multiline=True) == "ask why?"
    assert parse_action("Thought: hmm\nAction:   \n", multiline=True) is None
    assert parse_action("Thought: no action", multiline=True) is None
