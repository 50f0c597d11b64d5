"""`gymflow sql` is a read-only console: no file read or written but the tables, values printed as they are,
run-time errors as one line, long results cut at a row limit."""

import signal
import subprocess
import sys
import threading
import time

import pytest
from rich.cells import cell_len

from gymflow.cli import main
from gymflow.envs import ENVS
from gymflow.envs.instructions import build_splits, save_tasks
from gymflow.rollout.agenttraj import write_episodes
from gymflow.rollout.expert import run_expert
from gymflow.rollout.records import RunInfo
from gymflow.store.db import connect, read_only

SECRET = "canary-7f3a"  # in files outside data/: no output may show it
TRACKED = "data/rollouts/trajectories/wordle.turns.parquet"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A project folder: data/ with maze tasks and expert episodes of three environments, and files beside it."""
    root = tmp_path_factory.mktemp("repo")
    info = RunInfo("r", "trajectories", 0, "expert")
    for name, n in {"maze": 4, "textcraft": 2, "wordle": 1}.items():
        splits = build_splits(ENVS[name], n_train=n, n_eval=1, seed=0)
        if name == "maze":
            save_tasks(root / "data/instructions", name, splits)
        env = ENVS[name]()
        episodes = [run_expert(env, t) for t in splits["train"]]
        write_episodes(root / "data/rollouts/trajectories", name, episodes, info)
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    (outside / "t.csv").write_text(f"a,b\n{SECRET},1\n")
    (outside / "t.json").write_text(f'{{"a": "{SECRET}"}}\n')
    (outside / "evil.duckdb_extension").write_bytes(b"not an extension")
    connect(root / "outside").execute(f"copy (select '{SECRET}' as a) to '{outside}/t.parquet'")
    (root / "home").mkdir()
    return root


@pytest.fixture
def sql(repo, monkeypatch, capsys):
    """Run `gymflow sql` in-process from the project folder, as a user would; (exit code, stdout, stderr)."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(repo / "home"))  # where DuckDB keeps extensions and persistent secrets

    def run(query: str, *flags: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main(["--data", "data", "sql", query.replace("{root}", str(repo)), *flags])
            code = 0
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


def snapshot(root):
    """Every path under `root`, with the bytes of each file."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))
    }


def body(out: str) -> list[str]:
    """The table's row lines, without the header."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    return [line for line in lines[start + 1 :] if line.startswith("│")]


ESCAPES = {
    # reading any file but the tables
    "read_csv system file": "select * from read_csv('/etc/passwd', sep = ':')",
    "read_text system file": "select * from read_text('/etc/passwd')",
    "read_text absolute": "select * from read_text('{root}/outside/secret.txt')",
    "read_text relative": "select * from read_text('outside/secret.txt')",
    "read_text traversal": "select * from read_text('data/../outside/secret.txt')",
    "read_blob": "select * from read_blob('outside/secret.txt')",
    "read_csv_auto": "select * from read_csv_auto('outside/t.csv')",
    "file as table": "select * from 'outside/t.csv'",
    "read_json": "select * from read_json('outside/t.json')",
    "read_parquet outside": "select * from read_parquet('outside/t.parquet')",
    "read_parquet of a data file": f"select * from read_parquet('{TRACKED}')",
    "parquet_metadata": f"select * from parquet_metadata('{TRACKED}')",
    "sniff_csv": "select * from sniff_csv('/etc/passwd')",
    "glob system": "select * from glob('/etc/*')",
    "glob data": "select * from glob('data/**')",
    "path from getvariable": "set variable p = 'outside/secret.txt'; select * from read_text(getvariable('p'))",
    "path from expression": "select * from read_text(['outside/' || 'secret.txt'])",
    "url": "select * from read_csv('http://127.0.0.1:9/x.csv')",
    "copy from": "create table x (a varchar); copy x from 'outside/secret.txt'; select * from x",
    "import database": "import database 'outside'",
    "python variable": "select * from args",
    "environment": "select getenv('HOME')",
    # writing
    "copy to tracked output": f"copy (select 42) to '{TRACKED}'",
    "copy to tracked, no tmp file": f"copy (select 42) to '{TRACKED}' (use_tmp_file false)",
    "copy to tracked as csv": f"copy (select 42 as a) to '{TRACKED}' (format csv, overwrite true)",
    "copy to new file in data": "copy (select 42) to 'data/new.parquet'",
    "copy partitioned into data": "copy (select 42 as a) to 'data/part' (format parquet, partition_by a)",
    "copy to outside": "copy (select 42) to 'outside/new.csv'",
    "copy to absolute": "copy (select 42) to '{root}/outside/new.csv'",
    "copy a table out": "copy turns to 'outside/turns.parquet'",
    "copy before a select": "copy (select 42) to 'outside/new.csv'; select 1",
    "export database": "export database 'outside/exported'",
    # databases, extensions, secrets
    "attach new file": "attach 'outside/new.db'",
    "attach in data": "attach 'data/new.duckdb'",
    "attach read-only": "attach 'outside/new.db' (read_only)",
    "install": "install httpfs",
    "force install": "force install httpfs",
    "load extension": "load httpfs",
    "load file": "load 'outside/evil.duckdb_extension'",
    "persistent secret": "create persistent secret s (type s3, key_id 'k', secret 's')",
    # settings that would give any of it back
    "enable access": "set enable_external_access = true",
    "enable access globally": "set global enable_external_access = true",
    "reset access": "reset enable_external_access",
    "unlock": "set lock_configuration = false",
    "allowed directories": "set allowed_directories = ['/']",
    "allowed paths": "set allowed_paths = ['/etc/passwd']",
    "temp directory": "set temp_directory = 'outside/spill'",
    "profiling output": "set profiling_output = 'outside/profile.json'",
    "enable profiling": "pragma enable_profiling = 'json'",
    "query log": "set log_query_path = 'outside/queries.log'",
    "autoinstall": "set autoinstall_known_extensions = true",
    "python replacements": "set python_enable_replacements = true",
}


@pytest.mark.parametrize("query", ESCAPES.values(), ids=ESCAPES.keys())
def test_escape_is_refused_and_nothing_changes(repo, sql, query):
    before = snapshot(repo)
    code, out, err = sql(query)
    assert code == 2, out
    assert err.startswith("error: SQL: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert SECRET not in out + err and "root:" not in out
    assert snapshot(repo) == before  # no file written, created or changed, data/ included


def test_tracked_output_stays_readable_after_copy_attempts(repo, sql):
    before = (repo / TRACKED).read_bytes()
    sql(f"copy (select 42) to '{TRACKED}' (use_tmp_file false)")
    assert (repo / TRACKED).read_bytes() == before
    code, out, _ = sql("select count(*) as n from turns where episode_id like '%wordle%'")
    assert code == 0 and int(body(out)[0].strip("│ ")) > 0


def test_what_it_allows_stays_in_memory(repo, sql):
    """Tables of one's own, an in-memory database, a built-in extension, dropping a view: allowed, and no
    file changes."""
    before = snapshot(repo)
    code, out, _ = sql(
        "create table mine as select * from episodes; insert into mine select * from episodes; "
        "select count(*) as n from mine"
    )
    assert code == 0 and body(out) == ["│ 14 │"]  # 7 episodes, twice, in this process only
    assert "episodes is not an table" in sql("insert into episodes select * from episodes")[2]  # a view
    for query in ["attach ':memory:' as m; create table m.t as select 1", "load parquet", "drop view turns"]:
        assert sql(query)[0] == 0, query
    # a new console reads the files again
    assert body(sql("select count(*) as n from episodes")[1]) == ["│ 7 │"]
    assert snapshot(repo) == before


def test_console_tables_are_the_views(repo):
    query = """select e.env, count(*), sum(e.success), sum(length(t.text)) from episodes e
               join turns t using (episode_id) group by e.env order by e.env"""
    expected = connect(repo / "data").execute(query).fetchall()
    assert read_only(repo / "data").execute(query).fetchall() == expected
    assert read_only(repo / "data").execute("select count(*) from tasks").fetchone() == (5,)


def test_connect_stays_a_full_session_for_code(repo):
    """gymflow's own queries and Python users keep DuckDB as it is (they can open any file anyway)."""
    db = connect(repo / "data")
    assert db.execute(f"select count(*) from read_parquet('{repo / TRACKED}')").fetchone()[0] > 0


def test_markup_prints_as_is(sql):
    code, out, err = sql("select '[/x]' as a, '[red]x[/red]' as b, '[bold]' as c, '[link=http://x]y' as d")
    assert code == 0, err
    assert body(out) == ["│ [/x] │ [red]x[/red] │ [bold] │ [link=http://x]y │"]


def test_textcraft_system_prompt_prints_verbatim(repo, sql):
    query = "select text from turns where role = 'system' and episode_id like '%textcraft%' limit 1"
    prompt = connect(repo / "data").execute(query).fetchone()[0]
    assert "[" in prompt and "<" in prompt and "\n" in prompt  # what rich markup mangled
    code, out, _ = sql(query)
    assert code == 0
    lines = [line[2:-2].rstrip() for line in body(out)]
    assert lines == [line.rstrip() for line in prompt.split("\n")]


def test_values_as_duckdb_writes_them(sql):
    code, out, _ = sql("select 1 / 3 as third, 1.0::double as one, null as n, [1, 2] as l, 'a' as a, 'b' a")
    assert code == 0
    assert out.splitlines()[1] == "┃ third              ┃ one ┃ n    ┃ l      ┃ a ┃ a ┃"
    assert body(out) == ["│ 0.3333333333333333 │ 1.0 │ NULL │ [1, 2] │ a │ b │"]


def test_control_characters_are_shown_not_sent(sql):
    code, out, _ = sql("select e'a\\x1b[2Jb\\rc' as x")
    assert code == 0 and "\x1b" not in out and "\r" not in out
    assert body(out) == ["│ a\\x1b[2Jb\\x0dc │"]


FORMAT_CHARACTERS = {  # what a terminal would hide or act on: each value is printed as its escape
    0x202E: "\\u202e",  # right-to-left override
    0x2066: "\\u2066",  # left-to-right isolate
    0x200B: "\\u200b",  # zero width space
    0xFEFF: "\\ufeff",  # zero width no-break space
    0x00AD: "\\xad",  # soft hyphen
    0x2028: "\\u2028",  # line separator
    0xE0001: "\\U000e0001",  # language tag
}


def test_format_characters_are_shown_not_sent(sql):
    columns = ", ".join(f"'a' || chr({code}) || 'b' as c{i}" for i, code in enumerate(FORMAT_CHARACTERS))
    code, out, _ = sql(f"select {columns}")
    assert code == 0 and not any(chr(c) in out for c in FORMAT_CHARACTERS)
    assert body(out) == ["│ " + " │ ".join(f"a{escape}b" for escape in FORMAT_CHARACTERS.values()) + " │"]


def test_format_characters_in_an_error_are_shown_not_sent(sql):
    code, out, err = sql('select "\u202egnp.exe"')  # DuckDB names the column in its error
    assert code == 2 and "\u202e" not in err and "\\u202egnp.exe" in err


def test_wide_characters_keep_the_box_aligned(sql):
    code, out, _ = sql("select '日本語' as a, 'x' as b union all select 'abc', e'two\\nlines'")
    assert code == 0
    assert len({cell_len(line) for line in out.splitlines()}) == 1
    assert "│ 日本語 │ x     │" in out and "│        │ lines │" in out


RUNTIME_ERRORS = {
    "cast": ("select task_id::int from tasks", "Conversion Error"),
    "error()": ("select error('boom')", "Invalid Input Error: boom"),
    "syntax": ("selec 1", "Parser Error"),
    "unknown table": ("select * from nowhere", "Catalog Error"),
    "after many rows": (
        "select case when range < 50000 then range else error('late') end from range(60000)",
        "Invalid Input Error: late",
    ),
}


@pytest.mark.parametrize("query, message", RUNTIME_ERRORS.values(), ids=RUNTIME_ERRORS.keys())
def test_runtime_error_is_one_line(sql, query, message):
    code, out, err = sql(query)
    assert code == 2 and out == ""
    assert err.startswith(f"error: SQL: {message}") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_row_limit(sql):
    code, out, _ = sql("select * from range(250)")
    assert code == 0 and len(body(out)) == 100 and body(out)[-1].startswith("│ 99 ")
    assert out.splitlines()[-1] == "150 more rows not shown (250 in all); --limit 0 shows every row"
    code, out, _ = sql("select * from range(250)", "--limit", "0")
    assert code == 0 and len(body(out)) == 250 and out.splitlines()[-1].startswith("└")
    code, out, _ = sql("select * from range(250)", "--limit", "7")
    assert len(body(out)) == 7 and out.splitlines()[-1].startswith("243 more rows not shown")
    code, out, _ = sql("select * from range(100)")
    assert len(body(out)) == 100 and out.splitlines()[-1].startswith("└")
    code, _, err = sql("select 1", "--limit", "-1")
    assert code == 2 and err.strip() == "error: --limit must be 0 (every row) or more"


@pytest.mark.slow  # `gymflow sql` processes
def test_ctrl_c_stops_a_long_query(sql):
    """A query of a minute or more stops at Ctrl-C (DuckDB alone misses some), with exit code 130, no traceback."""
    ctrl_c = threading.Timer(2.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    ctrl_c.start()
    code, out, err = sql("select count(*) from range(10000000000) where hash(range) % 7 = 0")
    ctrl_c.join()
    assert code == 130 and out == "" and err == ""


@pytest.mark.slow  # `gymflow sql` processes
def test_a_reader_that_stops_early_is_no_error(repo):
    """`gymflow sql ... | head`: a closed pipe ends the command quietly."""
    cmd = [sys.executable, "-m", "gymflow", "sql", "select * from range(100000)", "--limit", "0"]
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(100).startswith("┏".encode())
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0 and proc.stderr.read() == b""


@pytest.mark.slow  # `gymflow sql` processes
def test_console_answers_without_pandas_and_pyarrow_still_finds_it(repo):
    """`gymflow sql` keeps pandas out of its start-up (pyarrow.dataset imports it only to ask if it is there); a
    pyarrow call that needs pandas afterwards in the same process still gets it."""
    probe = (
        "import sys\n"
        "from gymflow.cli import main\n"
        "main(['--data', 'data', 'sql', 'select count(*) as n from episodes'])\n"
        "print('pandas loaded:', 'pandas' in sys.modules)\n"
        "import pyarrow as pa\n"
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "│ 7 " in out.stdout  # the three environments' expert episodes: 4 + 2 + 1
    assert "pandas loaded: False" in out.stdout and out.stdout.rstrip().endswith("DataFrame")


BOUNDS = {  # what ran with no bound; the flag and the line it stops with
    "endless recursion": (
        "with recursive t(n) as (select 1 union all select n + 1 from t) select count(*) from t",
        ["--timeout", "1"],
        "error: SQL: query stopped after 1 s (--timeout 0 lifts the bound)",
    ),
    "long count": (
        "select count(*) from range(10000000000) where hash(range) % 7 = 0",
        ["--timeout", "0.5"],
        "error: SQL: query stopped after 0.5 s (--timeout 0 lifts the bound)",
    ),
    "a 2 GB string, default bound": (
        "select repeat('x', 2000000000)",
        [],
        "error: SQL: query stopped: it needed more than 2048 MB (--memory 0 lifts the bound)",
    ),
    "a long string_agg": (
        "select string_agg(range::varchar, ',') from range(200000000)",
        ["--memory", "256"],
        "error: SQL: query stopped: it needed more than 256 MB (--memory 0 lifts the bound)",
    ),
    "a 1 G element list": (
        "select range(1000000000)",
        ["--memory", "256"],
        "error: SQL: query stopped: it needed more than 256 MB (--memory 0 lifts the bound)",
    ),
    "a big distinct": (
        "select count(*) from (select distinct range from range(50000000))",
        ["--memory", "256"],
        "error: SQL: query stopped: it needed more than 256 MB (--memory 0 lifts the bound)",
    ),
}


@pytest.mark.parametrize("query, flags, line", BOUNDS.values(), ids=BOUNDS.keys())
def test_a_query_past_its_bounds_stops_with_one_line(sql, query, flags, line):
    started = time.monotonic()
    code, out, err = sql(query, *flags)
    assert (code, out, err) == (2, "", line + "\n")
    assert time.monotonic() - started < 20
    assert sql("select 42 as n")[1].count("42") == 1  # the process is bounded no longer


def test_the_flags_lift_the_bounds(sql):
    query = "select length(repeat('x', 150000000)) as n"
    assert "needed more than 100 MB" in sql(query, "--memory", "100")[2]
    code, out, _ = sql(query, "--memory", "0")
    assert code == 0 and body(out) == ["│ 150000000 │"]
    slow = "select count(sleep_ms(range * 0 + 100)) from range(6)"  # 0.6 s of sleep, in six parts
    assert sql(slow, "--timeout", "0.2")[2].startswith("error: SQL: query stopped after 0.2 s")
    assert sql(slow, "--timeout", "0")[0] == 0


@pytest.mark.parametrize("flag", ["--timeout", "--memory"])
def test_a_negative_bound_is_refused(sql, flag):
    code, _, err = sql("select 1", flag, "-1")
    assert code == 2 and err.strip() == f"error: {flag} must be 0 (no bound) or more"
