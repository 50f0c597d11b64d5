"""Household tasks in TextWorld games made offline (AgentGym's ALF role; ALFWorld itself cannot be downloaded).

A task is a TextWorld "custom" game, the game `tw-make custom --world-size R --nb-objects O --quest-length L
--only-last-action --seed S` makes, built with TextWorld's Python API from the task's `seed` and the settings
in its `hidden` dict. Generation is deterministic for a seed. The instruction is the quest's objective, which
names only the quest's last action ("put the bowl on the platter in the cookery"), so the agent has to find
the way, the keys and the containers itself, as in ALFWorld.

Text: objects keep TextWorld's household names (the "house" theme; its brand "TextWorld" becomes "Swedish"),
rooms are described with TextWorld's plain "basic" room grammar instead of the house theme's flavour text,
and the objective's greeting is replaced by "Your task is to". The theme is written into the cache directory
from the installed TextWorld's grammar files. Observations drop the banner, room headers, score lines and the
status bar; the first one also says what the player carries.

Cost: making a game takes about 0.15-0.3 s (`generate` does this to read the objective and walkthrough); the
first `reset` of a task compiles it with Inform 7 (about 1 s) into `$GYMFLOW_CACHE/textworld` (default
`~/.cache/gymflow/textworld`), keyed by seed, settings and TextWorld version, written atomically; later
resets start in about 0.05 s.

The game cache is bounded (a client of `gymflow serve-env household` can name any seed, and a game is about
420 KB): once its games pass `$GYMFLOW_HOUSEHOLD_CACHE_MB` (default 1024, about 2,400 games; the pipeline's
household sets in params.yaml are 250), a compile deletes the least recently used ones (a reset marks its game used)
until they fit. A game used in the last `IN_USE_SECONDS` is never deleted, so another process's game is not
taken while it loads (so a burst of new seeds may pass the bound by the games compiled in those seconds). A
reset loads a copy of its own (`private_copy`), so an eviction cannot take the file from Jericho; a reset whose game
went anyway between its lookup and the copy compiles it again.

Difficulty is the quest length, which is the walkthrough's length: 2, 4, 6 or 8 steps, in worlds of 3 to 6
rooms. Reward is 1 when the quest is won, else 0. The expert plays TextWorld's `policy_commands`, the
winning policy re-planned from the current state, so it also works mid-episode. Commands are checked
before they reach the game: one command per turn, starting with one of the game's verbs (meta commands such
as `quit` or `restart`, and several commands joined by '.' or 'then', would desynchronise the game).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import model_validator

from gymflow.envs.base import BadTask, Env, EnvSpec, Hidden, NoExpert, Step, Task, echo, task_rng
from gymflow.errors import UserError

# difficulty (walkthrough length) -> game settings
LEVELS: dict[str, dict[str, int]] = {
    "2": {"quest_length": 2, "rooms": 3, "objects": 6},
    "4": {"quest_length": 4, "rooms": 4, "objects": 8},
    "6": {"quest_length": 6, "rooms": 5, "objects": 10},
    "8": {"quest_length": 8, "rooms": 6, "objects": 12},
}
DIRECTIONS = ("north", "south", "east", "west")
MOVE_VERBS = ("look", "inventory", "go")
OBJECT_VERBS = ("take", "drop", "put", "insert", "open", "close", "unlock", "lock", "examine", "eat")
VERBS = MOVE_VERBS + OBJECT_VERBS
NO_OBJECT_VERBS = ("look", "inventory")
MAX_COMMAND_CHARS = 150
TASK_PREFIX = "Your task is to "
PARSER_ERRORS = (
    "You can't see any such thing",
    "I didn't understand",
    "I only understood",
    "That's not a verb",
    "You can't go that way",
    "You'll have to say",
    "What do you want",
)
INFOS = ("admissible_commands", "policy_commands", "description", "inventory", "facts", "won", "lost")

SYSTEM_PROMPT = (
    "Interact with a household to solve a task. You are an agent in a house of a few rooms; you see the room "
    "you are in and your goal, then the result of each action. Commands: look, inventory, go north/south/east/"
    "west, take OBJ, take OBJ from HOLDER, put OBJ on SUPPORTER, insert OBJ into CONTAINER, drop OBJ, open/close "
    "OBJ, unlock/lock OBJ with KEY, examine OBJ, eat OBJ. Closed doors and containers must be opened, locked ones "
    "unlocked with their key first. Give one command per turn. Answer in the format:\n"
    "Thought: <your thought>\nAction: <your action>"
)


# ---- game files -------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where compiled games live: $GYMFLOW_CACHE/textworld, else ~/.cache/gymflow/textworld."""
    base = os.environ.get("GYMFLOW_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gymflow")
    return Path(base) / "textworld"


@lru_cache(maxsize=1)
def _theme_files() -> dict[str, str]:
    """Household names (no "TextWorld" brand), plain room text, objectives that start with TASK_PREFIX."""
    import textworld.generator

    grammars = Path(textworld.generator.__file__).parent / "data" / "text_grammars"
    instruction = (grammars / "house_instruction.twg").read_text()
    instruction = re.sub(r"(?m)^quest_one_action:.*$", f"quest_one_action:{TASK_PREFIX}(action)", instruction)
    names = (grammars / "house_obj.twg").read_text().replace(";TextWorld\n", ";Swedish\n")  # a brand name
    return {
        "household_obj.twg": names,
        "household_room.twg": (grammars / "basic_room.twg").read_text(),
        "household_instruction.twg": instruction,
    }


def theme_digest() -> str:
    return hashlib.sha256(json.dumps(_theme_files(), sort_keys=True).encode()).hexdigest()[:12]


def theme() -> str:
    """The theme path prefix TextWorld globs (`<dir>/household*.twg`), written once per content."""
    folder = cache_root() / f"theme-{theme_digest()}"
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".theme-"))
        for name, text in _theme_files().items():
            (tmp / name).write_text(text)
        try:
            tmp.rename(folder)
        except OSError:  # another process wrote the same theme first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder / "household")


def game_options(seed: int, settings: dict[str, int]) -> Any:
    """The options `tw-make custom` builds from its flags, with our theme (a textworld GameOptions)."""
    from textworld.generator.data import KnowledgeBase
    from textworld.generator.game import GameOptions

    opts = GameOptions()
    opts.kb = KnowledgeBase.default()  # GameOptions would re-read the logic files for every game
    opts.seeds = int(seed)
    opts.nb_rooms = settings["rooms"]
    opts.nb_objects = settings["objects"]
    length = settings["quest_length"]
    opts.chaining.min_length = opts.chaining.max_length = opts.chaining.max_depth = length
    opts.grammar.theme = theme()
    opts.grammar.only_last_action = True
    return opts


def make_game(seed: int, settings: dict[str, int]) -> Any:
    """The textworld Game of a seed and settings (not compiled)."""
    import textworld.generator

    return textworld.generator.make_game(game_options(seed, settings))


def has_ambiguous_names(game: Any) -> bool:
    """Whether an object's name is made of words of another's ("box", "Microsoft limited edition box").

    The parser matches objects by their words, so such a game answers "Which do you mean" to a command of
    its own walkthrough and the expert stalls (1 game in ~100 at quest length 4).
    """
    names = [frozenset(i.name.lower().split()) for i in game.infos.values() if i.name and i.type != "r"]
    return any(a <= b for i, a in enumerate(names) for j, b in enumerate(names) if i != j)


def game_key(seed: int, settings: dict[str, int]) -> str:
    """Cache key: everything the game depends on."""
    import textworld

    parts = {"seed": seed, "settings": settings, "textworld": textworld.__version__, "theme": theme_digest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


CACHE_MB_VAR = "GYMFLOW_HOUSEHOLD_CACHE_MB"
DEFAULT_CACHE_MB = 1024  # about 2,400 games of ~420 KB; the pipeline's household sets are 250 games at most
LOAD_ATTEMPTS = 5  # a reset whose game another process evicts before it is copied compiles it again
IN_USE_SECONDS = 30.0  # a game used this recently is never evicted (another process may be loading it)
STALE_BUILD_SECONDS = 3600.0  # a build folder this old was left by a killed compile (one takes about 1 s)


def cache_limit() -> int:
    """The game cache's bound in bytes: $GYMFLOW_HOUSEHOLD_CACHE_MB (MiB, default DEFAULT_CACHE_MB)."""
    raw = os.environ.get(CACHE_MB_VAR, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not 0 <= mb < float("inf"):
        raise UserError(
            f"{CACHE_MB_VAR}={echo(raw[:40])} is not a size: give the household game cache's bound in MiB, "
            f"a number >= 0 (default {DEFAULT_CACHE_MB})"
        )
    return int(mb * 2**20)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def evict(root: Path, limit: int) -> int:
    """Delete the least recently used games in `root` until they take at most `limit` bytes; return the bytes
    left. A game's last use is its .z8's mtime (`game_file` touches it). Games used in the last IN_USE_SECONDS
    stay even past the limit; safe beside other processes that build, load and evict in the same folder."""
    now = time.time()
    games: list[tuple[float, int, Path]] = []  # (last use, bytes of .z8 and .json, .z8)
    total = 0
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return 0
    for entry in entries:
        path = Path(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if entry.name.startswith(".build-") and entry.is_dir(follow_symlinks=False):
            if now - st.st_mtime > STALE_BUILD_SECONDS:  # a compile killed midway; nothing loads from it
                shutil.rmtree(path, ignore_errors=True)
        elif entry.name.endswith(".z8") and not entry.name.startswith("."):
            size = st.st_size + _size(path.with_suffix(".json"))
            games.append((st.st_mtime, size, path))
            total += size
        elif entry.name.endswith(".json") and not entry.name.startswith("."):
            if path.with_suffix(".z8").exists():
                continue  # counted with its game
            if now - st.st_mtime > IN_USE_SECONDS:  # a .json whose .z8 went (or was never renamed in)
                path.unlink(missing_ok=True)
            else:
                total += st.st_size  # a game being renamed into place
    games.sort()
    for used, size, path in games:
        if total <= limit:
            break
        if now - used < IN_USE_SECONDS:
            break  # this one and every later one are in use
        try:  # look again: it may have been used since the scan
            recent = now - path.stat().st_mtime < IN_USE_SECONDS
        except FileNotFoundError:  # another process evicted it
            recent = False
        if recent:
            continue
        path.unlink(missing_ok=True)  # the .z8 first: a lookup that finds it finds its .json
        path.with_suffix(".json").unlink(missing_ok=True)
        total -= size
    return total


def game_file(seed: int, settings: dict[str, int]) -> Path:
    """The compiled game (.z8 next to its .json), compiled on first use; the .z8 appears last, atomically.
    A lookup marks the game used; a compile then bounds the cache (`evict`)."""
    import textworld.generator

    root = cache_root()
    path = root / f"{game_key(seed, settings)}.z8"
    try:
        os.utime(path)  # its last use, for the least-recently-used eviction
        if path.with_suffix(".json").exists():
            return path
    except FileNotFoundError:
        pass
    except OSError:  # a cache we may read but not touch
        if path.exists() and path.with_suffix(".json").exists():
            return path
    limit = cache_limit()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        opts = game_options(seed, settings)
        opts.path = str(tmp / "game.z8")
        opts.force_recompile = True
        built = Path(textworld.generator.compile_game(textworld.generator.make_game(opts), opts))
        os.utime(built.with_suffix(".json"))  # new: `evict` takes an old .json without its .z8 for a leftover
        os.replace(built.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(built, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    evict(root, limit)
    return path


@contextlib.contextmanager
def private_copy(path: Path) -> Iterator[Path]:
    """A copy of the cached game (.z8 and .json) of this load's own, for the block's time. Jericho's C code opens
    the story file again at `textworld.start` and at `reset`, and if it is gone exits the whole process (an env
    server with it); another process's eviction cannot take a copy. FileNotFoundError if the game went first."""
    tmp = Path(tempfile.mkdtemp(prefix="gymflow-household-"))
    try:
        for suffix in (".json", ".z8"):  # `evict` deletes the .z8 first: a copied .z8 had its .json
            shutil.copyfile(path.with_suffix(suffix), tmp / f"game{suffix}")
        yield tmp / "game.z8"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- text -------------------------------------------------------------------------------------------


def compact(text: str) -> str:
    """Game text without room headers, score lines, the end banner or the status bar, on one line."""
    text = text.split("\n>")[0]
    text = text.split("*** The End ***")[0]
    text = re.sub(r"(?m)^\s*-= .* =-\s*$", "", text)
    text = text.replace("Your score has just gone up by one point.", "")
    return " ".join(text.split())


def goal_of(instruction: str) -> str:
    """'Your task is to put the bowl on the platter.' -> 'put the bowl on the platter'."""
    goal = instruction.removeprefix(TASK_PREFIX).strip()
    return goal.rstrip(".!")


def check_command(command: str, admissible: list[str]) -> str | None:
    """Why a command cannot be sent to the game (one line with the fix), or None if it can."""
    if not command:
        return "Empty action. Write one command, e.g. 'look' or 'go north'."
    if len(command) > MAX_COMMAND_CHARS:
        return f"Action too long ({len(command)} characters). Write one short command, e.g. 'look'."
    words = command.lower().split()
    if re.search(r"[.;,!?]", command) or "then" in words:
        return "Give one command at a time, without '.', ',', ';' or 'then'."
    verb = words[0]
    if verb not in VERBS:
        return f"Unknown command '{echo(verb)}'. Start with one of: {', '.join(VERBS)}."
    if verb == "go" and (len(words) != 2 or words[1] not in DIRECTIONS):
        return "Use 'go north', 'go south', 'go east' or 'go west'."
    if len(words) == 1 and verb not in NO_OBJECT_VERBS:
        example = next((a for a in admissible if a.split()[0] == verb), f"{verb} OBJECT")
        return f"'{verb}' needs an object, e.g. '{example}'."
    return None


# ---- expert thoughts --------------------------------------------------------------------------------


class World:
    """The facts of the current state, for explaining the expert's next step."""

    def __init__(self, facts: list[Any]) -> None:
        self.facts = [(f.name, tuple(v.name for v in f.arguments)) for f in facts]
        self.here = next((a[1] for n, a in self.facts if n == "at" and a[0] == "P"), "room")
        self.held = {a[0] for n, a in self.facts if n == "in" and a[1] == "I"}

    def neighbour(self, room: str, direction: str) -> str | None:
        """The room `direction` of `room` (fact `north_of(B, A)`: B is north of A)."""
        return next((a[0] for n, a in self.facts if n == f"{direction}_of" and a[1] == room), None)

    def door_to(self, door: str) -> str | None:
        """The room on the other side of `door` from here."""
        return next((a[2] for n, a in self.facts if n == "link" and a[0] == self.here and a[1] == door), None)

    def is_door(self, name: str) -> bool:
        return any(n == "link" and a[1] == name for n, a in self.facts)


def _split(command: str, word: str) -> tuple[str, str]:
    """'take bowl from shelf', 'from' -> ('bowl', 'shelf'); ('bowl', '') if the word is absent."""
    head, _, tail = command.partition(f" {word} ")
    return head.split(" ", 1)[1] if " " in head else head, tail


def _explain_go(plan: list[str], goal: str, world: World) -> str:
    """Name the next step that is not a move and the room it happens in."""
    room, path = world.here, []
    for step in plan:
        if not step.startswith("go "):
            break
        room = world.neighbour(room, step.split()[1]) or room
        path.append(room)
    target = plan[len(path)] if len(path) < len(plan) else goal
    direction = plan[0].split()[1]
    via = f", so I go {direction}" if len(path) == 1 else f"; I go {direction} first, to the {path[0]}"
    return f"To {goal}, I next have to '{target}', which I can do from the {path[-1]}{via}."


def _explain_open_close(plan: list[str], goal: str, world: World) -> str:
    """A door on the way, a container holding what the plan takes next, or the goal itself."""
    verb, thing = plan[0].split(" ", 1)
    if verb == "open" and world.is_door(thing):
        return (
            f"The closed {thing} blocks the way to the {world.door_to(thing) or 'next room'}, so I open it."
        )
    wanted = [
        _split(s, "from")[0] for s in plan[1:] if s.startswith("take ") and s.endswith(f" from {thing}")
    ]
    if verb == "open" and wanted:
        return f"The {wanted[0]} I need is inside the closed {thing}, so I open it."
    if len(plan) == 1:
        return f"The task is to {goal}, and the {thing} is here, so I {verb} it. This completes the task."
    return f"To {goal}, the {thing} must be {'open' if verb == 'open' else 'closed'}, so I {verb} it."


def _explain_key(plan: list[str], goal: str) -> str:
    verb = plan[0].split()[0]
    target, key = _split(plan[0], "with")
    if verb == "unlock" and len(plan) > 1:
        return f"The {target} is locked and I carry the {key} that fits it, so I unlock it."
    ending = " This completes the task." if len(plan) == 1 else ""
    return f"To {goal}, I {verb} the {target} with the {key} I carry.{ending}"


def _explain_take(plan: list[str], goal: str) -> str:
    """Say what the item is for: a later lock, or the goal."""
    item, holder = _split(plan[0], "from")
    source = f" from the {holder}" if holder else ""
    use = next((s for s in plan[1:] if s.endswith(f" with {item}")), None)
    if use:
        return f"I need the {item} to {use.split()[0]} the {_split(use, 'with')[0]}, so I take it{source}."
    if len(plan) == 1:
        return f"The task is to {goal}: I take the {item}{source}. This completes the task."
    return f"To {goal}, I need the {item}, so I take it{source}."


def explain(plan: list[str], goal: str, world: World) -> str:
    """A short reason for plan[0], from the rest of the plan and the state."""
    command = plan[0]
    verb = command.split()[0]
    if verb == "go":
        return _explain_go(plan, goal, world)
    if verb in ("open", "close"):
        return _explain_open_close(plan, goal, world)
    if verb in ("unlock", "lock"):
        return _explain_key(plan, goal)
    if verb == "take":
        return _explain_take(plan, goal)
    if len(plan) == 1:
        return f"Everything is ready to {goal}: {command}. This completes the task."
    return f"To {goal}, {len(plan)} steps remain; next: {command}."


# ---- environment ------------------------------------------------------------------------------------


def _level_rounds(rng: random.Random) -> Iterator[str]:
    """Levels in shuffled rounds: a balanced draw then uses nearly every (costly) game it makes."""
    while True:
        yield from rng.sample(list(LEVELS), len(LEVELS))


class HouseholdHidden(Hidden):
    quest_length: int
    rooms: int
    objects: int
    walkthrough: list[str]

    @model_validator(mode="after")
    def _a_level(self) -> HouseholdHidden:
        """The settings of one of the levels: others make a game TextWorld compiles on reset, at any size."""
        settings = {"quest_length": self.quest_length, "rooms": self.rooms, "objects": self.objects}
        if settings not in LEVELS.values():
            raise ValueError(f"{settings} are not the settings of a level ({', '.join(LEVELS)})")
        return self


class Household(Env):
    hidden_schema = HouseholdHidden
    spec = EnvSpec(
        name="household",
        description="TextWorld household quests made offline (ALFWorld role): find, unlock, take, put",
        system_prompt=SYSTEM_PROMPT,
        reward_range=(0.0, 1.0),
        success_threshold=1.0,
        max_turns=30,
        expert="TextWorld walkthrough, re-planned from the current state (policy_commands)",
    )

    def __init__(self) -> None:
        super().__init__()
        self.game: Any = None  # a textworld Environment
        self.state: Any = None  # the last textworld GameState

    @classmethod
    def difficulties(cls) -> list[str]:
        return list(LEVELS)

    @classmethod
    def generate(cls, split: str, seed: int) -> Iterator[Task]:
        import textworld

        rng = task_rng("household-tasks", seed)
        for level in _level_rounds(rng):
            game_seed = rng.randrange(2**31)
            settings = LEVELS[level]
            game = make_game(game_seed, settings)
            walkthrough = list(game.walkthrough)
            if len(walkthrough) != settings["quest_length"]:  # never seen; keeps the difficulty honest
                continue
            if has_ambiguous_names(game):
                continue
            yield Task(
                env="household",
                task_id=f"household-{level}-{game_seed}",
                split=split,
                difficulty=level,
                seed=game_seed,
                instruction=game.objective.strip(),
                hidden={**settings, "walkthrough": walkthrough, "textworld": textworld.__version__},
            )

    def _reset(self, task: Task) -> str:
        import textworld

        self.close()
        settings = {k: int(task.hidden[k]) for k in ("quest_length", "rooms", "objects")}
        for attempt in range(LOAD_ATTEMPTS):
            path = game_file(task.seed, settings)
            try:
                # warnings: jericho's "not fully supported" (TextWorld tracks the state itself)
                with private_copy(path) as game, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.game = textworld.start(str(game), textworld.EnvInfos(**dict.fromkeys(INFOS, True)))
                    self.state = self.game.reset()  # the game is in memory from here on
                break
            except FileNotFoundError:  # evicted by another process between the lookup and the copy
                self.close()
                if attempt == LOAD_ATTEMPTS - 1:
                    raise
        if list(self.state.policy_commands) != list(task.hidden["walkthrough"]):
            raise BadTask(  # the row's mistake, or a row made by another TextWorld: either way not this game
                f"{echo(task.task_id)}: the rebuilt game differs from the task: hidden.walkthrough is not the "
                f"walkthrough of the game that seed {task.seed} makes with {settings} "
                f"(TextWorld {textworld.__version__}, task made with {echo(str(task.hidden.get('textworld')))}); "
                "send the row as the instructions stage wrote it, or rebuild the instructions"
            )
        carrying = compact(self.state.inventory)
        carrying = "" if "nothing" in carrying else f" {carrying}"
        return f"{task.instruction} {compact(self.state.description)}{carrying}"

    def _step(self, action: str) -> Step:
        command = " ".join(action.split()).rstrip(".!")
        problem = check_command(command, self.state.admissible_commands)
        if problem:
            return Step(problem, self.reward, False)
        admissible = command in self.state.admissible_commands
        self.state, _, _ = self.game.step(command)
        text = compact(self.state.feedback) or "Nothing happens."
        if self.state.won:
            return Step(f"{text} Task complete.", 1.0, True)
        if self.state.lost:
            return Step(f"{text} You lost.", 0.0, True)
        if not admissible and text.startswith(PARSER_ERRORS):
            text += " Choose one of the available actions."
        return Step(text, 0.0, False)

    def available_actions(self) -> list[str] | None:
        return list(self.state.admissible_commands) if self.state is not None and not self.done else None

    def expert_step(self) -> tuple[str, str]:
        plan = list(self.state.policy_commands) if self.state is not None else []
        if not plan:
            raise NoExpert("household: the quest can no longer be won from this state")
        return explain(plan, goal_of(self.task.instruction), World(self.state.facts)), plan[0]

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None
