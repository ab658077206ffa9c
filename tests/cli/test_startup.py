"""Start-up: what `import elmo_hf` and `elmo-hf --help` load, and Ctrl-C while the command is still starting."""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import platform
import resource
import signal
import subprocess
import sys

import pytest

from elmo_hf_cli import build_parser, main
from elmo_hf.runtime.process_tuning import COMMAND_GC_THRESHOLDS, COMMAND_MALLOC_TUNABLES, user_set_malloc_options
from scripts.ctrl_c_stress import interrupted_run, start_up_run

COMMANDS = [name for name in build_parser()._subparsers._group_actions[0].choices]


def modules_after_each(*steps: str) -> list[set[str]]:
    """The modules one fresh interpreter has loaded after each of ``steps``, run one after the other."""
    report = "import json, sys\nprint(json.dumps(sorted(sys.modules)))"
    script = "\n".join(f"{step}\n{report}" for step in steps)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    reports = result.stdout.strip().splitlines()[-len(steps):]
    return [set(json.loads(line)) for line in reports]


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    return modules_after_each(code)[0]


def top_level(modules: set[str]) -> set[str]:
    """The top-level packages of ``modules`` (``torch`` for ``torch.nn``)."""
    return {name.split(".")[0] for name in modules}


# What `import elmo_hf` and its config, tokenizer and Auto registrations leave unimported: transformers' modeling code,
# which brings torch._dynamo and torch.distributed (about half of the import before issue 28), and ours. The model
# classes come on first use (elmo_hf/__init__.py); benchmarks/startup.py times both.
MODELING_MODULES = {
    "transformers.modeling_utils", "torch._dynamo", "torch.distributed.tensor",
    "elmo_hf.modeling_elmo", "elmo_hf.modeling_elmo_downstream", "elmo_hf.modeling_elmo_pretraining",
    "elmo_hf.recurrence_elmo", "elmo_hf.fast_recurrence_elmo", "elmo_hf.token_cache_elmo",
}


def test_import_elmo_hf_loads_no_modeling_code_and_its_model_classes_no_datasets_pyarrow_or_ray():
    # One interpreter (each fresh import of the model classes costs 5-10 CPU-seconds): first the config, the
    # tokenizer and the Auto registrations, then the model classes.
    configured, with_models = modules_after_each(
        "import elmo_hf\nfrom elmo_hf import DEFAULT_MODEL_DIR, ELMoConfig, ELMoHFError, ELMoTokenizer\n"
        "from transformers import CONFIG_MAPPING, TOKENIZER_MAPPING\n"
        "assert CONFIG_MAPPING['elmo'] is ELMoConfig and TOKENIZER_MAPPING[ELMoConfig] is ELMoTokenizer\n"
        "ELMoTokenizer()(['a sentence .'])",
        "from elmo_hf import ELMoModel, ELMoTokenizer, ELMoForPreTraining",
    )
    assert "elmo_hf" in configured and not MODELING_MODULES & configured
    assert not {"datasets", "pyarrow", "ray", "h5py", "scipy"} & top_level(configured)
    assert "elmo_hf.modeling_elmo" in with_models and "transformers.modeling_utils" in with_models  # the check can fail
    assert not {"datasets", "pyarrow", "ray", "h5py"} & top_level(with_models)


# The modules of elmo_hf that the command line reads before a command runs: each imports nothing heavy, and the
# package's __init__ imports none of its modules (elmo_hf/__init__.py).
TORCH_FREE_MODULES = {
    "elmo_hf", "elmo_hf.choices_elmo", "elmo_hf.runtime", "elmo_hf.runtime.parallelism", "elmo_hf.runtime.process_tuning",
    "elmo_hf.corpus", "elmo_hf.corpus.formats",  # the table of input formats: --input-format's choices and help
}


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_of_every_command_loads_no_torch_and_only_torch_free_modules_of_elmo_hf(command):
    arguments = ["--help"] if command is None else [command, "--help"]
    loaded = modules_after(
        f"from elmo_hf_cli import main\ntry:\n    main({arguments!r})\nexcept SystemExit as exit:\n    assert exit.code == 0"
    )
    assert not {"torch", "transformers", "datasets", "numpy"} & top_level(loaded)
    assert {name for name in loaded if name.split(".")[0] == "elmo_hf"} <= TORCH_FREE_MODULES


def test_import_elmo_hf_imports_none_of_its_modules_and_a_torch_free_module_imports_no_torch():
    bare, readers = modules_after_each("import elmo_hf", "import elmo_hf.corpus.readers, elmo_hf.embedding.manifest")
    assert {name for name in bare if name.split(".")[0] == "elmo_hf"} == {"elmo_hf"}
    assert "elmo_hf.embedding.manifest" in readers  # the check can fail
    assert not {"torch", "transformers", "datasets"} & top_level(readers)


# A one-sentence `elmo-hf embed` in a fresh interpreter, as the command process (``python -m elmo_hf_cli``) or as
# ``main`` inside a program: the collections made while it imports its libraries (torch is in, the embed driver not yet
# run whole), the frozen count at the end, and the modules it loaded.
EMBED_ONE_SENTENCE_REPORTING = """
import atexit, gc, json, runpy, sys
collections_during_imports = []

def during_the_library_imports():
    driver = sys.modules.get("elmo_hf.embedding.driver")
    return "torch" in sys.modules and not hasattr(driver, "embed_corpus")

def on_collection(phase, info):
    if phase == "start" and during_the_library_imports():
        collections_during_imports.append(info["generation"])

gc.callbacks.append(on_collection)
atexit.register(lambda: print("REPORT" + json.dumps(
    {{"collections": collections_during_imports, "frozen": gc.get_freeze_count(), "modules": sorted(sys.modules)}}
)))
arguments = ["embed", "corpus.txt", "--output", "out", "--no-progress"]
{run}
"""
AS_THE_COMMAND = "sys.argv[1:] = arguments\nrunpy.run_module('elmo_hf_cli', run_name='__main__')"
AS_MAIN_IN_A_PROGRAM = "from elmo_hf_cli import main\nassert main(arguments) == 0"

# What the embed path has no use for: other commands' libraries and the extras they need.
NOT_ON_THE_EMBED_PATH = (
    "ray", "h5py", "faiss", "matplotlib", "sklearn", "sentence_transformers", "kiwipiepy",
    "elmo_hf.conversion", "elmo_hf.pretraining", "elmo_hf.probing", "elmo_hf.search", "elmo_hf.integrations",
    "elmo_hf.scoring", "elmo_hf.embedding.ray_engine",
)


def embed_one_sentence_report(tmp_path, run: str) -> dict:
    (tmp_path / "corpus.txt").write_text("The bank raised its rates .\n")
    result = subprocess.run(
        [sys.executable, "-c", EMBED_ONE_SENTENCE_REPORTING.format(run=run)], capture_output=True, text=True,
        timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "manifest.json").is_file()
    return json.loads(result.stdout.split("REPORT")[1])


def test_a_one_sentence_embed_collects_no_garbage_while_it_imports_and_loads_only_what_it_uses(tmp_path):
    report = embed_one_sentence_report(tmp_path, AS_THE_COMMAND)
    assert report["collections"] == []  # docs/results/startup.md: the collector's walks over the imports' objects
    loaded = set(report["modules"])
    assert "elmo_hf.modeling_elmo" in loaded and "datasets" in loaded  # the check can fail
    assert not {name for name in loaded if name.startswith(NOT_ON_THE_EMBED_PATH)}


def test_main_inside_a_program_keeps_its_collector_while_the_libraries_import(tmp_path):
    """The control: with the program's own collector the same imports are collected many times, and nothing is
    frozen."""
    report = embed_one_sentence_report(tmp_path, AS_MAIN_IN_A_PROGRAM)
    assert len(report["collections"]) > 10 and report["frozen"] == 0


PAUSED_ONLY_IN_THE_COMMAND_PROCESS = """
import gc, json
from elmo_hf.runtime.process_tuning import imports_without_collection, tuned_command_process
with imports_without_collection():
    seen = {"outside": gc.isenabled()}
seen["frozen outside"] = gc.get_freeze_count()
with tuned_command_process():
    with imports_without_collection():
        seen["inside"] = gc.isenabled()
        with imports_without_collection():
            seen["nested"] = gc.isenabled()
        seen["after the nested block"] = gc.isenabled()
    seen["after"], seen["frozen after"] = gc.isenabled(), gc.get_freeze_count()
    try:
        with imports_without_collection():
            raise ImportError
    except ImportError:
        seen["after an error"] = gc.isenabled()
print(json.dumps(seen))
"""


def test_the_collector_is_paused_for_the_imports_only_inside_the_command_process_and_always_resumed():
    result = subprocess.run(
        [sys.executable, "-c", PAUSED_ONLY_IN_THE_COMMAND_PROCESS], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout)
    assert seen["outside"] and seen["frozen outside"] == 0
    assert not seen["inside"] and not seen["nested"] and not seen["after the nested block"]
    assert seen["after"] and seen["frozen after"] > 1_000 and seen["after an error"]


def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path):
    (tmp_path / "corpus.txt").write_text("a sentence .\n")
    # 1 s in, the command is importing torch and the library (several seconds); SIGINT as from a terminal
    result = interrupted_run(["embed", "corpus.txt", "--output", "out"], 1.0, tmp_path, whole_group=False)
    stderr = result.stderr
    assert result.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr[-2000:]
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == ["corpus.txt"], (os.listdir(tmp_path), stderr[-2000:])


@pytest.mark.slow
def test_ctrl_c_at_moments_spread_over_a_whole_run_never_gives_a_traceback(tmp_path):
    """SIGINT every 0.1 s from 0.3 s (past the interpreter's own start, which the CLI cannot guard) until a
    one-sentence embed ends before or as it comes (about 3 s on 2 cores idle, more beside the other slow tests), so
    the moments cover the imports, the work and the exit. Each outcome must be one the CLI promises
    (``scripts/ctrl_c_stress.py``'s ``start_up_run``): interrupted (130, no output, or the finished shards kept and
    said so), finished (0), or ended by SIGINT in the exit with the report out (``common.ctrl_c_ends_the_exit``); no
    traceback, ignored exception or abort."""
    outcomes = []
    while not outcomes or outcomes[-1][1] == "interrupted":
        seconds = round(0.3 + 0.1 * len(outcomes), 1)
        assert seconds <= 30, outcomes  # a one-sentence run ends in seconds
        work = tmp_path / f"run-{len(outcomes)}"
        work.mkdir()
        outcome, problems = start_up_run(seconds, work)
        outcomes.append((seconds, outcome))
        assert not problems, (seconds, outcome, problems)


# A command whose work is interrupted inside code CPython runs from a string (``exec(str)``: dataclasses builds every
# class that way, so any import can be inside one). Under ``python -m`` CPython 3.11 then kills the finished
# interpreter with SIGINT even though the interrupt was caught, unless ``main`` clears that
# (``common.exit_code_after_interrupt``): the Ctrl-C test above failed in CI that way.
INTERRUPTED_INSIDE_EXEC = """
import sys
from elmo_hf_cli import command_line, common, embed
embed.run = lambda args: exec("raise KeyboardInterrupt")
sys.argv[1:] = ["embed", "corpus.txt", "--output", "out"]
command_line()
"""


def run_as_module(tmp_path, program: str) -> subprocess.CompletedProcess:
    """Run ``program`` as ``python -m`` does for ``elmo_hf_cli``, in ``tmp_path`` beside a one-line corpus."""
    (tmp_path / "corpus.txt").write_text("a sentence .\n")
    (tmp_path / "interrupted_program.py").write_text(program)
    return subprocess.run(
        [sys.executable, "-m", "interrupted_program"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def test_interrupt_inside_exec_still_exits_130(tmp_path):
    result = run_as_module(tmp_path, INTERRUPTED_INSIDE_EXEC)
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "interrupted" in result.stderr


def test_without_the_reset_cpython_would_end_by_sigint(tmp_path):
    """The control: the same program with the reset switched off dies by SIGINT (if a CPython release stops doing
    that, this fails and the reset in ``exit_code_after_interrupt`` can go)."""
    switched_off = INTERRUPTED_INSIDE_EXEC.replace("embed.run =", "common.exec = lambda source: None\nembed.run =")
    result = run_as_module(tmp_path, switched_off)
    assert result.returncode == -signal.SIGINT, (result.returncode, result.stderr[-2000:])


# Ctrl-C as a command's libraries are first imported, inside a class being built: CPython 3.11 turns a
# KeyboardInterrupt raised in ``__set_name__`` into ``RuntimeError: Error calling __set_name__`` (sending SIGINT at
# random moments of the start-up hit that inside datasets' ``DownloadConfig``; see
# ``common.libraries_imported_whole``). The finder builds such a class when ``{library}`` is first looked for.
CTRL_C_WHILE_A_LIBRARY_IMPORTS = """
import os, signal, sys

class CtrlCWhileNamed:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # Python runs its SIGINT handler between these steps, still inside __set_name__
            pass

class CtrlCAsItImports:
    def find_spec(self, name, path=None, target=None):
        if name == {library!r}:
            sys.meta_path.remove(self)
            type("Built", (), {{"field": CtrlCWhileNamed()}})
        return None

sys.meta_path.insert(0, CtrlCAsItImports())
from elmo_hf_cli import command_line
sys.argv[1:] = {arguments!r}
command_line()
"""


@pytest.mark.parametrize(
    "arguments, library",
    [
        (["embed", "corpus.txt", "--output", "out"], "datasets"),
        (["embed", "corpus.txt", "--output", "out"], "torch"),
        (["similarity", "--word", "sentence", "a sentence .", "one more sentence ."], "torch"),
        (["export", "--model", ".", "--output", "out"], "torch"),
    ],
)
def test_ctrl_c_while_the_libraries_import_exits_130_without_a_traceback(tmp_path, arguments, library):
    result = run_as_module(tmp_path, CTRL_C_WHILE_A_LIBRARY_IMPORTS.format(library=library, arguments=arguments))
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "interrupted" in result.stderr, result.stderr[-2000:]
    made = set(os.listdir(tmp_path)) - {"__pycache__"}  # Python's own, where PYTHONDONTWRITEBYTECODE is not set
    assert sorted(made) == ["corpus.txt", "interrupted_program.py"]


# Ctrl-C while the interpreter exits after the command returned, inside an ``atexit`` callback (the first 20 ms of a
# one-sentence embed's 0.16 s exit run 16 of them): see ``common.ctrl_c_ends_the_exit``.
CTRL_C_WHILE_EXITING = """
import atexit, os, signal, sys
from elmo_hf_cli import command_line, embed

def ctrl_c_in_an_atexit_callback():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass
    print("the callback ran to its end", file=sys.stderr)

atexit.register(ctrl_c_in_an_atexit_callback)
embed.run = lambda args: print("the command's report") or 0
sys.argv[1:] = ["embed", "corpus.txt", "--output", "out"]
command_line()
"""


def test_ctrl_c_while_exiting_ends_the_process_by_sigint_with_its_report_out(tmp_path):
    result = run_as_module(tmp_path, CTRL_C_WHILE_EXITING)
    assert result.returncode == -signal.SIGINT, (result.returncode, result.stderr[-2000:])
    assert result.stdout == "the command's report\n"
    assert "Traceback" not in result.stderr and "ran to its end" not in result.stderr, result.stderr[-2000:]


def the_command_process_reporting(report: str) -> str:
    """The `elmo-hf` process as `python -m elmo_hf_cli` runs it, with a probe that prints ``report`` (an expression)
    from the last atexit handler: what the command leaves the interpreter's shutdown with."""
    return (
        "import atexit, gc, runpy\n"
        f"atexit.register(lambda: print({report}))\n"
        "runpy.run_module('elmo_hf_cli', run_name='__main__')\n"
    )


COLLECTOR_AT_EXIT = the_command_process_reporting(
    "'at-exit', *gc.get_threshold(), gc.get_freeze_count(), len(gc.get_objects())"
)


@pytest.mark.parametrize(("arguments", "exit_code"), [(["--version"], 0), (["embed", "--no-such-option"], 2)])
def test_the_command_process_collects_young_objects_less_often_and_exits_with_everything_frozen(arguments, exit_code):
    result = subprocess.run(
        [sys.executable, "-c", COLLECTOR_AT_EXIT, *arguments], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == exit_code, result.stderr[-2000:]
    *thresholds, frozen, not_frozen = map(int, result.stdout.split("at-exit")[1].split())
    assert tuple(thresholds) == COMMAND_GC_THRESHOLDS
    assert frozen > 1_000 and not_frozen < 100  # the shutdown's search for cycles has nothing left to walk


def test_main_inside_a_program_leaves_the_collector_as_it_was(capsys):
    thresholds = gc.get_threshold()  # this test process's are the command's (tests/conftest.py)
    gc.set_threshold(700, 10, 10)  # Python's default, as in a user's program
    try:
        frozen = gc.get_freeze_count()
        assert main(["--version"]) == 0
        # No gc.freeze: it would move every object of this process's young generations (thousands) into the frozen
        # one. The count may fall: a frozen object that the call frees leaves it (one did once, in a loaded full run).
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() <= frozen
    finally:
        gc.set_threshold(*thresholds)
    assert capsys.readouterr().out.startswith("elmo-hf ")


def test_the_elmo_hf_executable_is_the_command_process():
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="elmo-hf")
    assert entry.value == "elmo_hf_cli:command_line"


# Page faults of a workload that glibc's default thresholds hand back to the kernel at every round: 100 blocks of
# 100 kB (below the mmap threshold, so on the heap) filled and freed, 20 times. With the command's thresholds
# (`elmo_hf.runtime.process_tuning.reuse_freed_memory`) the freed heap is kept and the rounds after the first fault no page in again.
ROUNDS, BLOCKS, BLOCK_BYTES = 20, 100, 100_000
FAULTS_OF_REUSED_HEAP = (
    "import ctypes, resource\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]\n"
    "libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]\n"
    "def faults_of_reused_heap():\n"
    "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    f"    for _ in range({ROUNDS}):\n"
    f"        held = [libc.malloc({BLOCK_BYTES}) for _ in range({BLOCKS})]\n"
    "        for block in held:\n"
    f"            libc.memset(block, 1, {BLOCK_BYTES})\n"
    "        for block in reversed(held):\n"
    "            libc.free(block)\n"
    "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
)
PAGES_TOUCHED = ROUNDS * BLOCKS * BLOCK_BYTES // resource.getpagesize()


def faults_after(program: str, *arguments: str, env: dict[str, str] | None = None) -> int:
    """The page faults of ``FAULTS_OF_REUSED_HEAP``'s workload run in a fresh interpreter after ``program``."""
    script = FAULTS_OF_REUSED_HEAP + program
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return int(result.stdout.split("faults")[1])


THE_COMMAND_PROCESS = the_command_process_reporting("'faults', faults_of_reused_heap()")
MAIN_INSIDE_A_PROGRAM = "from elmo_hf_cli import main\nmain(['--version'])\nprint('faults', faults_of_reused_heap())\n"
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc's thresholds are glibc's")


@glibc_only
def test_the_command_process_reuses_freed_memory_instead_of_faulting_it_in_again():
    assert faults_after(THE_COMMAND_PROCESS, "--version") < PAGES_TOUCHED / 10


# A fresh interpreter that the command process starts (as `embed --workers N --threads M` spawns its workers): the
# faults of the same workload there.
FAULTS_IN_A_CHILD = (
    "__import__('subprocess').run([__import__('sys').executable, '-c', "
    f"{FAULTS_OF_REUSED_HEAP + 'print(faults_of_reused_heap())'!r}], capture_output=True, text=True).stdout.strip()"
)


@glibc_only
def test_the_processes_the_command_starts_reuse_freed_memory_too():
    """A spawned child starts with the thresholds in ``GLIBC_TUNABLES``, after any tunables the user set."""
    assert faults_after(the_command_process_reporting(f"'faults', {FAULTS_IN_A_CHILD}"), "--version") < PAGES_TOUCHED / 10
    other = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7"}  # another malloc tunable: kept, and the thresholds added
    probe = the_command_process_reporting(f"'faults', {FAULTS_IN_A_CHILD}, 'tunables', __import__('os').environ['GLIBC_TUNABLES']")
    result = subprocess.run([sys.executable, "-c", FAULTS_OF_REUSED_HEAP + probe, "--version"], capture_output=True, text=True, timeout=60, env={**os.environ, **other})
    assert result.stdout.split()[-1] == f"glibc.malloc.tcache_count=7:{COMMAND_MALLOC_TUNABLES}", result.stdout
    # The control: a child of a plain program faults its pages in again (here 12,337 faults against 2,443: the
    # first round's 2,441 pages and no more).
    assert faults_after(f"print('faults', {FAULTS_IN_A_CHILD})\n") > PAGES_TOUCHED / 10


@glibc_only
def test_main_inside_a_program_and_a_user_who_tunes_malloc_keep_their_own_malloc():
    """The control, and the user's choice: with glibc's defaults the workload faults its pages in at every round."""
    assert faults_after(MAIN_INSIDE_A_PROGRAM) > PAGES_TOUCHED / 2
    user_chose = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}
    assert faults_after(THE_COMMAND_PROCESS, "--version", env=user_chose) > PAGES_TOUCHED / 2


@pytest.mark.parametrize(
    ("environment", "user_set"),
    [
        ({}, False),
        ({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=1024"}, False),
        ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.mmap_threshold=1048576"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, True),
        ({"MALLOC_ARENA_MAX": "2"}, False),  # another malloc setting: the thresholds are still the command's
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
    ],
)
def test_a_malloc_setting_in_the_environment_is_the_users_choice(monkeypatch, environment, user_set):
    for name in ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert user_set_malloc_options() is user_set
