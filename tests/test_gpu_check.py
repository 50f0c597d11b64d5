"""benchmarks/gpu_check.py, as far as a machine without a GPU can test it: its CPU path end to end with the
libraries a lent GPU machine lacks made unimportable, and its one-line refusals (no CUDA, a missing module)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gymflow.train.sft import use_bf16

pytestmark = pytest.mark.slow  # runs benchmarks/gpu_check.py end to end in processes

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
# Installed here, not on the lent machine (docs/results/gpu.md): importing any of them must not be needed there.
ABSENT = [
    "trl",
    "datasets",
    "duckdb",
    "prefect",
    "dvc",
    "openai",
    "ray",
    "vllm",
    "gymnasium",
    "minigrid",
    "pygame",
    "scienceworld",
    "py4j",
    "minecraft_data",
    "textworld",
    "wordfreq",
]
PARTS = [
    "rollout_default",
    "rollout_15M",
    "rollout_default_b8",
    "rollout_15M_b8",
    "update_default",
    "update_15M",
    "rl",
]


def run(args: list[str], absent: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The script in a fresh interpreter where each of `absent` fails to import, as if not installed."""
    prelude = (
        f"import runpy, sys; sys.modules.update(dict.fromkeys({absent!r})); "
        f"sys.argv = [{str(SCRIPT)!r}, *{args!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", prelude], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_cpu_path_runs_every_part_without_the_libraries_a_lent_machine_lacks(tmp_path):
    out = tmp_path / "gpu.json"
    done = run(["--device", "cpu", "--quick", "--out", str(out)], ABSENT, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["machine"]["device"] == "cpu" and result["quick"] is True
    for part in PARTS:
        assert "error" not in result[part], result[part]
    for size in ("default", "15M"):
        rollout, update = result[f"rollout_{size}"], result[f"update_{size}"]
        assert rollout["episodes"] == 4 and rollout["params"] > 0
        assert min(rollout["episodes_per_s"], rollout["env_steps_per_s"], rollout["tokens_per_s"]) > 0
        assert update["seconds"] > 0 and update["tokens_per_s"] > 0 and update["optimizer_steps"] == 8
    assert result["rollout_15M"]["params"] > result["rollout_default"]["params"]
    wide = result["rollout_default_b8"]
    assert wide["batch"] == wide["episodes"] == 8 and wide["params"] == result["rollout_default"]["params"]
    rl = result["rl"]
    assert rl["iterations"] == 1 and rl["episodes"] == 4 and rl["train_tokens_per_s"] > 0
    assert not set(ABSENT) & set(result["modules"]) and "torch" in result["modules"]
    assert result["seconds"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json"], "left a temporary file behind"
    # SFT needs TRL, datasets and DuckDB, which a lent machine has only if carried: skipped, not failed
    assert result["sft"] == {
        "skipped": "no Python module 'datasets': carry trl, datasets and duckdb (with pandas, multiprocess, "
        "dill, xxhash) as wheels (docs/results/gpu.md)"
    }


def test_with_the_sft_libraries_carried_the_sft_part_trains_one_pass(tmp_path):
    out = tmp_path / "gpu.json"
    carried = [m for m in ABSENT if m not in ("trl", "datasets", "duckdb")]
    done = run(["--device", "cpu", "--quick", "--out", str(out)], carried, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    sft = json.loads(out.read_text())["sft"]
    native = use_bf16("auto")  # this CPU's choice: bf16 where it has AVX-512 BF16 or AMX
    assert sft["episodes"] == 8 and sft["batch"] == 4 and sft["bf16"] is native
    assert sft["train_tokens_per_s"] > 0 and sft["seconds"] > 0
    assert 0 < sft["train_loss"] < 10  # an untrained 400-id model starts near ln(400) = 6.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json"], "left a temporary file behind"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_line_on_stderr_and_no_file(tmp_path):
    out = tmp_path / "gpu.json"
    done = run(["--out", str(out)], [], tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA" in lines[0] and "--device cpu" in lines[0], done.stderr
    assert not out.exists()


def test_a_missing_module_is_named_in_one_line(tmp_path):
    done = run(["--device", "cpu", "--quick", "--out", str(tmp_path / "gpu.json")], ["pydantic"], tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "gpu_check: no Python module 'pydantic' here: carry it as a wheel (docs/results/gpu.md)"
    ]


def test_an_environment_whose_library_is_missing_names_it_and_the_others_load(tmp_path):
    code = (
        "import sys; sys.modules['minigrid'] = None\n"
        "from gymflow.envs import ENVS, make_env\n"
        "from gymflow.errors import UserError\n"
        "assert make_env('maze').spec.name == 'maze'\n"
        "for use in (lambda: make_env('babyai'), lambda: ENVS['babyai'].spec):\n"
        "    try:\n"
        "        use()\n"
        "    except UserError as e:\n"
        "        print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = "environment 'babyai' needs the Python module 'minigrid', which is not installed here"
    assert done.stdout.splitlines() == [expected, expected]
