import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gymflow.config import check_machine, load_params
from gymflow.env_names import ENV_NAMES, TASK_LIMITS
from gymflow.errors import UserError
from gymflow.train.presets import switches

ROOT = Path(__file__).resolve().parents[1]

GOOD = """
envs: [maze]
instructions: {seed: 0, train: {maze: 10}, eval: {maze: 5}}
trajectories: {tasks: {maze: 8}}
"""


SWEET = """sweet:
  env: maze
  start: sft
  offline: {tasks: 5, samples: 4}
  critics: {hidden: {}, value: {kind: value}}
  actor: {critic: hidden}
  best_of_n: {tasks: 3}
"""


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_valid_params_load(tmp_path):
    params = load_params(write(tmp_path, GOOD))
    assert params.instructions.train == {"maze": 10} and params.trajectories.tasks["maze"] == 8


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD + "typo_section: 1\n", "typo_section: Extra inputs are not permitted"),
        (GOOD.replace("envs: [maze]", "envs: [mazee]"), "unknown environment"),
        (GOOD.replace("train: {maze: 10}", "train: {}"), "instructions.train has no size for \\['maze'\\]"),
        (GOOD.replace("maze: 8", "maze: 80"), "trajectories.tasks exceeds instructions.train"),
        (GOOD.replace("seed: 0", "seed: zero"), "instructions.seed: Input should be a valid integer"),
        ("envs: [maze\n", "not valid YAML"),
        (
            GOOD + "sft: {envs: [maze]}\n",
            "sft.envs: give each environment its passes over AgentTraj, e.g. {maze: 3}",
        ),
        (GOOD + "sft: {envs: {maze: 0}}\n", "sft.envs.maze: Input should be greater than 0"),
        (
            GOOD + "sft: {envs: {maze: 1}, bf16: fast}\n",
            "sft.bf16: 'fast' is not a precision: use true, false or auto",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft}, b: {explorer: c}}}\n",
            "iteration b explores with 'c'; use sft or an earlier iteration \\['a'\\]",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft, temprature: 1}}}\n",
            "evol.iterations.a: temprature: Extra inputs are not permitted",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, learn_from: first, iterations: {a: {explorer: sft}}}\n",
            "evol.learn_from: Input should be 'init', 'sft' or 'last'",
        ),
        (
            GOOD + "evol: {tasks: {wordle: 5}, iterations: {a: {explorer: sft}}}\n",
            "evol.tasks has \\['wordle'\\], which are not in envs",
        ),
        # numbers are strict: no bool, string or float where an int is meant
        (
            GOOD.replace("seed: 0", "seed: true"),
            "instructions.seed: Input should be a valid integer, got true",
        ),
        (GOOD.replace("maze: 10", "maze: true"), "instructions.train.maze: .* valid integer, got true"),
        (GOOD + "sft: {envs: {maze: 1}, lr: true}\n", "sft.lr: Input should be a valid number, got true"),
        (
            GOOD + "sft: {envs: {maze: 1}, lr: '0.002'}\n",
            'sft.lr: Input should be a valid number, got "0.002"',
        ),
        (GOOD + "sft: {envs: {maze: 1}, batch_size: 8.0}\n", "sft.batch_size: .* valid integer, got 8.0"),
        (GOOD + "sft: {envs: {maze: true}}\n", "sft.envs.maze: Input should be a valid integer, got true"),
        (GOOD + "sft: {envs: {maze: 1}, bf16: 1}\n", "sft.bf16: 1 is not a precision"),
        (
            GOOD + "evol: {tasks: {maze: true}, iterations: {a: {explorer: sft}}}\n",
            "evol.tasks.maze: Input should be a valid integer, got true",
        ),
        (
            GOOD + "evol: {tasks: {maze: 5}, merge_sft: 1, iterations: {a: {explorer: sft}}}\n",
            "evol.merge_sft: Input should be a valid boolean, got 1",
        ),
        (GOOD + "rl: {tasks: {maze: 2}, iterations: true}\n", "rl.iterations: .* valid integer, got true"),
        (
            GOOD + "rl: {tasks: {maze: 2}, horizon: fixd}\n",
            "rl.horizon: Input should be 'fixed', got \"fixd\"",
        ),
        (GOOD + "rl: {tasks: {maze: 2}, start: evol9}\n", "rl.start is 'evol9'; use one of the agents"),
        # sizes: negative, and more than an environment can make (a run would go silent, or fill memory)
        (
            GOOD.replace("maze: 10", "maze: -5"),
            "instructions.train.maze: .* greater than or equal to 0, got -5",
        ),
        (
            GOOD.replace("maze: 10", "maze: 1e9"),
            "instructions.train.maze: .* valid integer, got 1000000000.0",
        ),
        (
            GOOD.replace("maze: 10", "maze: 1000000000"),
            "instructions.train.maze \\+ instructions.eval.maze is 1,000,000,005, more than the 100,000 tasks",
        ),
        (
            "envs: [textcraft]\ninstructions: {train: {textcraft: 500}, eval: {textcraft: 100}}\n"
            "trajectories: {tasks: {textcraft: 1}}\n",
            "instructions.train.textcraft \\+ instructions.eval.textcraft is 600, more than the 543 tasks",
        ),
        (
            "envs: [sciworld]\ninstructions: {train: {sciworld: 10}, eval: {sciworld: 900}}\n"
            "trajectories: {tasks: {sciworld: 1}}\n",
            "instructions.eval.sciworld is 900, more than the 887 eval tasks sciworld can make",
        ),
        (GOOD + "rl: {tasks: {maze: 2}, samples: 1000000}\n", "rl.samples: .* less than or equal to 1000"),
        # model and batch sizes past any machine (issue 37): each names its key and ceiling
        (GOOD + "model: {hidden_size: 1000000000}\n", "model.hidden_size: .* less than or equal to 65536"),
        (GOOD + "model: {layers: 100000}\n", "model.layers: .* less than or equal to 1024, got 100000"),
        (GOOD + "model: {max_length: 1000000000000}\n", "model.max_length: .* less than or equal to 1048576"),
        (GOOD + "model: {vocab_size: 1000000000}\n", "model.vocab_size: .* less than or equal to 1048576"),
        (GOOD + "sft: {envs: {maze: 1}, batch_size: 100000000}\n", "sft.batch_size: .* or equal to 65536"),
        (GOOD + "rollout: {max_new_tokens: 10000000}\n", "rollout.max_new_tokens: .* or equal to 1048576"),
        (GOOD + "rollout: {engine: ray, workers: 100000}\n", "rollout.workers: .* or equal to 1024"),
        (GOOD + "rl: {tasks: {maze: 2}, max_tokens: 1e12}\n", "rl.max_tokens: .* valid integer"),
        (GOOD + SWEET.replace("tasks: 3}", "tasks: 3, ns: [1, 100000]}"), "sweet.best_of_n.ns.1: .* 1000"),
        # non-finite numbers: YAML reads .inf and .nan as floats, and `gt=0` lets inf through
        (
            GOOD + "sft: {envs: {maze: 1}, lr: .inf}\n",
            "sft.lr: Input should be a finite number, got Infinity",
        ),
        (GOOD + "sft: {envs: {maze: 1}, warmup: .nan}\n", "sft.warmup: .* finite number, got NaN"),
        (GOOD + "evaluate: {envs: [maze], temperature: -.inf}\n", "evaluate.temperature: .* finite number"),
        (
            GOOD + "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft, threshold: .nan}}}\n",
            "evol.iterations.a: threshold: Input should be a finite number, got NaN",
        ),
        (
            GOOD + SWEET.replace("value: {kind: value}", "value: {beta: .inf}"),
            "sweet.critics.value: beta: .*finite",
        ),
        (GOOD + "evaluate: {envs: [maze], k: 1e9}\n", "evaluate.k: .* valid integer, got 1000000000.0"),
        # rollout settings have their own section: an older params.yaml is told where each key went
        (
            GOOD + "evaluate: {envs: [maze], batch_size: 64}\n",
            "^\\S+: evaluate.batch_size moved to rollout.batch_size: put it under `rollout:`$",
        ),
        (
            GOOD + "evaluate: {envs: [maze], max_new_tokens: 80, servers: {}}\n",
            ": evaluate.max_new_tokens, evaluate.servers moved to rollout.max_new_tokens, rollout.servers: put",
        ),
        (GOOD + "rollout: {batch_size: 0}\n", "rollout.batch_size: .* greater than or equal to 1, got 0"),
        (GOOD + "rollout: {k: 1}\n", "rollout.k: Extra inputs are not permitted"),
        # where episodes play: servers are URLs, environments are registered ones, the engine is local or ray
        (
            GOOD + "rollout: {env_servers: {maze: ['127.0.0.1:8100']}}\n",
            "rollout.env_servers: .*maze: '127.0.0.1:8100' is not an http",
        ),
        (GOOD + "rollout: {env_servers: {maze: []}}\n", "rollout.env_servers: .*maze: give at least one URL"),
        (
            GOOD + "rollout: {env_servers: {mazes: ['http://a:1']}}\n",
            "rollout.env_servers: .*unknown environment\\(s\\) \\['mazes'\\]",
        ),
        (GOOD + "rollout: {servers: {sft: 'localhost:8000/v1'}}\n", "rollout.servers: .*is not an http"),
        (GOOD + "rollout: {engine: spark}\n", "rollout.engine: Input should be 'local' or 'ray'"),
        (GOOD + "rollout: {engine: ray, workers: 0}\n", "rollout.workers: .* greater than or equal to 1"),
        (
            GOOD + "rollout: {engine: ray}\nrl: {tasks: {maze: 2}, early_stop: 0.9}\n",
            "rl.early_stop needs rollout.engine local",
        ),
        # duplicate keys: PyYAML would keep the last one silently
        (
            GOOD.replace("maze: 10}", "maze: 10, maze: 3}"),
            "line 3: duplicate key 'maze' \\(first on line 3\\)",
        ),
        (GOOD + "envs: [maze]\n", "line 5: duplicate key 'envs' \\(first on line 2\\); keep one"),
        # SWEET-RL: a critic variant is a CriticConfig's overrides; the actor ranks by one of them
        (
            GOOD + SWEET.replace("value: {kind: value}", "value: {kind: q}"),
            "sweet.critics.value: kind: Input should be",
        ),
        (
            GOOD + SWEET.replace("value: {kind: value}", "value: {lr: -1}"),
            "sweet.critics.value: lr: .* greater than",
        ),
        (
            GOOD + SWEET.replace("actor: {critic: hidden}", "actor: {critic: mine}"),
            "sweet.actor.critic is 'mine', not one of",
        ),
        (GOOD + SWEET.replace("env: maze", "env: colbench"), "sweet.env 'colbench' is not in envs"),
        (
            GOOD + "rl: {tasks: {maze: 2}, difficulties: {apps: ['1', '2']}}\n",
            "rl.difficulties has \\['apps'\\], which rl.tasks does not train on; drop them",
        ),
        (GOOD + SWEET.replace("start: sft", "start: evol9"), "sweet.start is 'evol9'; use one of the agents"),
        (
            GOOD + SWEET.replace("samples: 4", "samples: 1"),
            "sweet.offline.samples: .* greater than or equal to 2",
        ),
    ],
)
def test_bad_params_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(UserError, match=message) as err:
        load_params(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_a_critic_variant_is_the_shared_critic_with_its_overrides_and_the_seed(tmp_path):
    sweet = load_params(write(tmp_path, GOOD + SWEET.replace("start: sft", "start: sft\n  seed: 7"))).sweet
    hidden, value = sweet.critic_config("hidden"), sweet.critic_config("value")
    assert (hidden.kind, value.kind, hidden.seed, value.seed) == ("advantage", "value", 7, 7)
    assert sweet.seeded(sweet.dpo).seed == 7 and sweet.dpo.seed == 0


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_an_iteration_overrides_the_shared_evol_settings_for_itself_only(tmp_path):
    evol = "evol: {tasks: {maze: 5}, temperature: 0.7, iterations: {a: {explorer: sft}, b: {explorer: a, temperature: 1.0}}}\n"
    params = load_params(write(tmp_path, GOOD + evol)).evol
    assert params.at("a").temperature == 0.7 and params.at("b").temperature == 1.0
    assert params.at("b").tasks == {"maze": 5} and (params.index("a"), params.index("b")) == (1, 2)


def test_agents_trained_from_sft_are_evaluated_where_they_trained_unless_asked_for_all(tmp_path):
    three = GOOD.replace("[maze]", "[maze, wordle, babyai]").replace(
        "{maze: 10}", "{maze: 10, wordle: 10, babyai: 10}"
    )
    three = three.replace("{maze: 5}", "{maze: 5, wordle: 5, babyai: 5}").replace(
        "{maze: 8}", "{maze: 8, wordle: 8, babyai: 8}"
    )
    rest = (
        "evaluate: {envs: [maze, wordle, babyai]%s}\n"
        "evol: {tasks: {maze: 5}, iterations: {a: {explorer: sft, tasks: {wordle: 2}}, b: {explorer: a}}}\n"
        "rl: {tasks: {babyai: 2, maze: 2}}\n"
    )
    params = load_params(write(tmp_path, three + rest % ""))
    assert params.evaluate.derived == "trained"
    assert params.evaluated_envs("sft") == params.evaluated_envs("init") == ["maze", "wordle", "babyai"]
    assert params.evaluated_envs("rl") == ["maze", "babyai"]  # in evaluate.envs' order
    # AgentEvol's agents and the control play evol.tasks' environments (dvc.yaml's dependency), not an override
    assert (
        params.evaluated_envs("a")
        == params.evaluated_envs("b")
        == params.evaluated_envs("control")
        == ["maze"]
    )
    assert params.evaluated_envs("sweet") == ["maze", "wordle", "babyai"]
    everywhere = load_params(write(tmp_path, three + rest % ", derived: all"))
    assert all(everywhere.evaluated_envs(p) == ["maze", "wordle", "babyai"] for p in ("rl", "a", "control"))


def test_numbers_yaml_1_2_reads_are_numbers_and_an_int_is_a_float(tmp_path):
    """2e-3 is a string to PyYAML (YAML 1.1 wants 2.0e-3) but a number to DVC and YAML 1.2: it is read as one."""
    text = (
        GOOD
        + "sft: {envs: {maze: 1}, lr: 2e-3, warmup: 1}\nrl: {tasks: {maze: 2}, lr: 1E-4, temperature: 1}\n"
    )
    params = load_params(write(tmp_path, text))
    assert params.sft.lr == 0.002 and params.rl.lr == 1e-4
    assert isinstance(params.sft.warmup, float) and isinstance(params.rl.temperature, float)
    assert params.instructions.train["maze"] == 10 and isinstance(params.instructions.train["maze"], int)


def test_yaml_anchors_and_merge_keys_are_not_duplicates(tmp_path):
    text = (
        GOOD
        + "evol:\n  tasks: &t {maze: 5}\n  iterations:\n    a: {explorer: sft}\n    b: {<<: *t, explorer: a}\n"
    )
    with pytest.raises(UserError, match="evol.iterations.b: maze: Extra inputs"):  # merged, then rejected
        load_params(write(tmp_path, text))


def test_the_default_params_load():
    """The repository's params.yaml is within every bound above."""
    params = load_params(ROOT / "params.yaml")
    assert params.rl is not None and params.rl.start in ["sft", *params.evol.iterations]
    # `rollout:` has defaults, yet the file carries it: dvc.yaml's stages list its keys, which DVC reads there
    assert re.search(r"^rollout:", (ROOT / "params.yaml").read_text(), re.MULTILINE)


@pytest.mark.slow  # Python processes
def test_reading_params_imports_no_environment():
    """The params check (and every stage's start) stays quick: gymflow.config lists environments by name."""
    code = "import json, sys; import gymflow.config; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = {name.split(".")[0] for name in json.loads(out.stdout)}
    heavy = {"minigrid", "gymnasium", "scienceworld", "py4j", "textworld", "minecraft_data", "torch", "numpy"}
    assert not loaded & heavy
    assert "gymflow.envs" not in json.loads(out.stdout)


def test_the_names_and_limits_agree_with_the_environments():
    from gymflow.envs import ENVS
    from gymflow.envs.sciworld import SciWorld
    from gymflow.envs.textcraft import TextCraft
    from gymflow.envs.wordle import Wordle

    assert list(ENVS) == list(ENV_NAMES) and all(cls.spec.name == name for name, cls in ENVS.items())
    assert TASK_LIMITS["wordle"] == {"total": sum(1 for _ in Wordle.generate("train", 0))}
    assert TASK_LIMITS["textcraft"] == {"total": sum(1 for _ in TextCraft.generate("train", 0))}
    assert TASK_LIMITS["sciworld"] == {
        split: sum(SciWorld.capacity(split).values()) for split in ("train", "eval")
    }


@pytest.mark.slow  # Python processes
@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["solve", "maze", "--n", "1000000000"],
            "maze makes at most 100,000 train tasks; ask for --n 100000",
        ),
        (["solve", "textcraft", "--n", "544"], "textcraft makes at most 543 train tasks"),
        (["solve", "sciworld", "--n", "888", "--split", "eval"], "sciworld makes at most 887 eval tasks"),
    ],
)
def test_solve_refuses_more_tasks_than_an_environment_makes(tmp_path, args, message):
    """Before this bound, `gymflow solve maze --n 1000000000` drew tasks silently past 680 MB."""
    out = subprocess.run(
        [sys.executable, "-m", "gymflow", "--data", str(tmp_path), *args], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stderr.startswith(f"error: {message}")
    assert out.stderr.count("\n") == 1 and not out.stdout


@pytest.mark.parametrize(
    "rl, message",
    [
        ("{tasks: {maze: 2}, switches: {epochs: true}}", "rl.switches: epochs: .*, got true"),
        ("{tasks: {maze: 2}, algorithm: lop}", "rl.algorithm 'lop' is not a preset; one of loop, "),
        ("{tasks: {maze: 2}, algorithm: ppo, switches: {level: traj}}", "gae gives one advantage per token"),
        ("{tasks: {maze: 2}, switches: {kl_coef: .nan}}", "rl.switches: kl_coef: .* finite number, got NaN"),
    ],
)
def test_bad_rl_switches_are_one_line_errors_of_the_params_stage(tmp_path, monkeypatch, capsys, rl, message):
    """The presets live beside the trainer (gymflow.train.presets); stage `params` checks them with the rest."""
    from stages import params as params_stage

    with pytest.raises(UserError, match=message):
        switches(load_params(write(tmp_path, GOOD + f"rl: {rl}\n")).rl)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["stages/params.py"])
    (tmp_path / "params.yaml").write_text(GOOD + f"rl: {rl}\n")
    with pytest.raises(SystemExit) as stop:
        params_stage.run_stage(params_stage.main)
    assert stop.value.code == 2 and not (tmp_path / "data/params.ok").exists()
    assert re.search(message, capsys.readouterr().err.splitlines()[0])


def test_rl_trains_on_the_difficulties_it_names(tmp_path, monkeypatch):
    """LOOP trains on AppWorld's difficulties 1 and 2 only (`rl.difficulties`); a level that leaves nothing is a
    one-line error naming the levels there are."""
    from gymflow.envs.base import Task
    from gymflow.envs.instructions import save_tasks
    from stages.rl import train_tasks

    tasks = [
        Task("maze", f"t{i}", "train", level, i, "go") for i, level in enumerate(["5x5", "6x6", "7x7", "5x5"])
    ]
    save_tasks(tmp_path / "data", "maze", {"train": tasks})
    monkeypatch.chdir(tmp_path)
    assert [t.task_id for t in train_tasks("maze", ["5x5", "7x7"])] == ["t0", "t2", "t3"]
    assert len(train_tasks("maze", None)) == 4
    with pytest.raises(
        UserError, match="rl.difficulties.maze keeps no train task: its difficulties are 5x5, 6x6, 7x7"
    ):
        train_tasks("maze", ["9x9"])


def test_a_policy_with_several_servers_gives_each_worker_its_own(tmp_path):
    text = GOOD + "rollout: {servers: {sft: ['http://a/v1', 'http://b/v1'], init: 'http://c/v1'}}\n"
    rollout = load_params(write(tmp_path, text)).rollout
    assert [rollout.server_for("sft", w) for w in range(3)] == ["http://a/v1", "http://b/v1", "http://a/v1"]
    assert rollout.server_for("init", 1) == "http://c/v1"
    assert rollout.server_for("evol1") is None


def stage_error(tmp_path, monkeypatch, capsys, text: str) -> str:
    """Run the params stage on `text` in `tmp_path`: its one-line error (exit 2, nothing written), or ''."""
    from stages import params as params_stage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["stages/params.py"])
    (tmp_path / "params.yaml").write_text(text)
    try:
        params_stage.run_stage(params_stage.main)
    except SystemExit as stop:
        assert stop.code == 2 and not (tmp_path / "data/params.ok").exists()
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ")
        return line.removeprefix("error: ")
    assert (tmp_path / "data/params.ok").exists()
    return ""


def model_dir(path: Path, *files: str) -> Path:
    path.mkdir(parents=True)
    for name in files:
        (path / name).write_text("{}")
    return path


@pytest.mark.parametrize(
    "name, message",
    [
        ("/nonexistent", "model.name_or_path /nonexistent is not a directory$"),
        ("/etc", "model.name_or_path /etc holds no config.json: name a Hugging Face model directory"),
        ("/etc/hostname", "model.name_or_path /etc/hostname is not a directory"),
        ("data/models/smollm2", "is not a directory \\(build it: python -m gymflow.models.pretrained"),
        ("{tmp}/no_tokenizer", "no_tokenizer holds no tokenizer \\(one of tokenizer.json, tokenizer.model"),
        ("{tmp}/model", ""),  # config.json and tokenizer.json
        ("{tmp}/sentencepiece", ""),
        ("nobody/not-cached", "'nobody/not-cached' is neither a directory nor a model in the local Hugging"),
        ("not a hub id!", "'not a hub id!' is neither a directory nor .* nothing is downloaded at run time"),
        ("org/cached", ""),
        ("org/config-only", "'org/config-only' is neither a directory nor a model in the local"),
    ],
)
def test_the_params_stage_refuses_a_model_that_is_not_here(tmp_path, monkeypatch, capsys, name, message):
    """`init_model` only records `model.name_or_path`: a missing model (/nonexistent) failed there after DVC
    deleted data/models/init, and a directory holding none (/etc) at SFT. A Hub id is read from the local cache
    only: nothing is downloaded at run time."""
    import huggingface_hub.constants

    model_dir(tmp_path / "model", "config.json", "tokenizer.json")
    model_dir(tmp_path / "sentencepiece", "config.json", "tokenizer.model")
    model_dir(tmp_path / "no_tokenizer", "config.json", "tokenizer_config.json")
    cache = tmp_path / "hub"
    for repo, files in [("cached", ["config.json", "vocab.json"]), ("config-only", ["config.json"])]:
        model_dir(cache / f"models--org--{repo}/snapshots/abc", *files)
        (cache / f"models--org--{repo}/refs").mkdir()
        (cache / f"models--org--{repo}/refs/main").write_text("abc")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    text = GOOD + f"model: {{name_or_path: {json.dumps(name.format(tmp=tmp_path))}}}\n"
    found = stage_error(tmp_path, monkeypatch, capsys, text)
    assert re.search(message, found) if message else found == ""


def test_the_built_decoders_parameter_count_is_the_models():
    """`parameters` is what bounds a built model by memory: it counts what build_model builds."""
    from transformers import PreTrainedTokenizerFast

    from gymflow.config import ModelConfig, parameters
    from gymflow.models.build import build_model

    for cfg in [ModelConfig(), ModelConfig(vocab_size=500, hidden_size=64, heads=8, kv_heads=2, layers=3)]:
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=_word_level(cfg.vocab_size))
        model = build_model(cfg, tokenizer)
        assert parameters(cfg) == sum(p.numel() for p in model.parameters())


def _word_level(size: int):
    """A tokenizer of exactly `size` ids, so the model's vocabulary is `vocab_size`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    return Tokenizer(WordLevel({f"w{i}": i for i in range(size)}, unk_token="w0"))


BIG = "{hidden_size: 1024, intermediate_size: 2048, heads: 8, kv_heads: 8, layers: 32}"  # 3.4e8 parameters


@pytest.mark.parametrize(
    "model, sft, message",
    [
        (
            "{hidden_size: 4096, intermediate_size: 11008, heads: 32, kv_heads: 32, layers: 8}",
            "",
            "^model.hidden_size 4,096 makes a 1.63e\\+09-parameter model; building it in RAM takes 4 bytes a "
            "parameter \\(fp32\\), 6.1 GiB, more than this machine's 4.0 GiB: model.hidden_size at most 2,974 "
            "with the other sizes as given$",
        ),
        (
            BIG,
            "sft: {envs: {maze: 1}}\n",
            "^model.layers 32 makes a 3.38e\\+08-parameter model; fine-tuning all of it \\(sft.lora_rank 0\\) "
            "takes 16 bytes .* 5.0 GiB, more than this machine's 4.0 GiB: model.layers at most 25 with the",
        ),
        (BIG, "sft: {envs: {maze: 1}, lora_rank: 8}\n", ""),  # with LoRA, the weights only need building
        (BIG, "", ""),
        (
            "{vocab_size: 1048576, hidden_size: 65536, heads: 64, kv_heads: 8}",
            "",
            "model.vocab_size fits at no value with the other sizes as given$",
        ),
    ],
)
def test_the_params_stage_refuses_a_built_model_bigger_than_memory(
    tmp_path, monkeypatch, capsys, model, sft, message
):
    """Bounds by this machine (here made a 4 GiB one without a GPU): the size most out of proportion to the
    default is named, with its largest value that fits."""
    from gymflow import config

    monkeypatch.setattr(config, "ram_bytes", lambda: 4 << 30)
    monkeypatch.setattr(config, "largest_gpu_bytes", lambda: 0)
    found = stage_error(tmp_path, monkeypatch, capsys, GOOD + f"model: {model}\n" + sft)
    assert re.search(message, found) if message else found == ""
    if limit := re.search(r"model.(\w+) at most ([\d,]+)", found):
        key, value = limit[1], int(limit[2].replace(",", ""))
        cfg, full = load_params(tmp_path / "params.yaml").model, bool(sft)
        assert config.memory_shortfall(cfg.model_copy(update={key: value}), full) is None
        assert config.memory_shortfall(cfg.model_copy(update={key: value + 1}), full) is not None


def test_the_default_params_fit_this_machine():
    """The params stage's machine check passes the repository's params.yaml (a 0.8M-parameter model)."""
    check_machine(load_params(ROOT / "params.yaml"))


def test_params_yaml_names_every_knob_with_its_value():
    """Issue 37: the README says params.yaml holds every knob; `dvc exp run -S rollout.engine=ray` failed with
    "Key 'engine' is not in struct" because it did not. Sub-sections whose seed is the section's own (sweet's
    critic, actor, dpo, mtdpo: `SweetParams.seeded`) need no seed of their own."""
    import typing

    from pydantic import BaseModel

    from gymflow.config import Params

    raw = yaml.safe_load(Path("params.yaml").read_text())
    derived = {"sweet.critic.seed", "sweet.actor.seed", "sweet.dpo.seed", "sweet.mtdpo.seed"}

    def models(annotation: object) -> list[type[BaseModel]]:
        """The section models a field holds (itself, or in an Optional); not those in a dict of names."""
        if typing.get_origin(annotation) is dict:
            return []
        found = [a for a in (typing.get_args(annotation) or (annotation,)) if isinstance(a, type)]
        return [a for a in found if issubclass(a, BaseModel)]

    def missing(model: type[BaseModel], data: dict, path: str) -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            key = f"{path}.{name}".lstrip(".")
            if name not in data:
                out += [] if key in derived else [key]
            elif isinstance(data[name], dict):
                for sub in models(field.annotation):
                    out += missing(sub, data[name], key)
        return out

    assert missing(Params, raw, "") == []
