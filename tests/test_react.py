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
